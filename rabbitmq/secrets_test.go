package rabbitmq_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/rabbitmq"
)

// secret is a password no test log, error or metric may show.
const secret = "S3cretPw-XYZ"

// TestPasswordNeverShown: a bus on a transport whose URL holds a wrong
// password, or the right host on a closed port, fails to start; neither its
// error, nor what it logged from New through Start and Stop, nor its
// metrics show the password.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	for name, edit := range map[string]func(u *url.URL){
		"wrong password": func(u *url.URL) { u.User = url.UserPassword("guest", secret) },
		"closed port":    func(u *url.URL) { u.User = url.UserPassword("guest", secret); u.Host = "127.0.0.1:1" },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireBroker(t)
			rawURL := refusedURL(t, edit)
			var logs bustest.LogBuffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			tr, err := rabbitmq.New(rawURL, rabbitmq.Options{Logger: log, DialTimeout: 3 * time.Second,
				ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close(context.Background())
			b, err := bus.New(bus.Config{Endpoint: "secrets", Transport: tr, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			startErr := b.Start(ctx)
			if startErr == nil {
				t.Fatal("Start succeeded")
			}
			_ = b.Stop(context.Background())
			for what, text := range map[string]string{
				"Start's error": startErr.Error(), "the log": logs.String(),
				"Metrics()": fmt.Sprintf("%+v", b.Metrics()), "Identity()": tr.Identity(),
			} {
				if strings.Contains(text, secret) {
					t.Errorf("%s shows the password: %s", what, text)
				}
			}
		})
	}
}

// A URL that does not parse is refused by New with an error that names
// what is wrong, without the password.
func TestNewHidesThePasswordOfABadURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"amqp://guest:" + secret + "@127.0.0.1:abc/",
		"amqps://guest:" + secret + "@127.0.0.1:5672/%zz",
		"amqp://guest:" + secret + "@127.0.0.1:5672/?heartbeat=x",
	} {
		_, err := rabbitmq.New(u, rabbitmq.Options{})
		if err == nil {
			t.Errorf("New(%s) succeeded", strings.ReplaceAll(u, secret, "…"))
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("New's error shows the password: %v", err)
		}
	}
}

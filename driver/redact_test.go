package driver_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"testing"

	"github.com/postbus/bus/driver"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		// URLs of every driver.
		"amqp://guest:S3cret@127.0.0.1:5672/sales":           "amqp://guest:xxxxx@127.0.0.1:5672/sales",
		"nats://u:S3cret@127.0.0.1:4222":                     "nats://u:xxxxx@127.0.0.1:4222",
		"redis://:S3cret@127.0.0.1:6379/0":                   "redis://:xxxxx@127.0.0.1:6379/0",
		"postgres://u:S3cret@127.0.0.1:5432/test?x=1":        "postgres://u:xxxxx@127.0.0.1:5432/test?x=1",
		"postgres://u:S3cret@h1:5432,h2:5432/test":           "postgres://u:xxxxx@h1:5432,h2:5432/test",
		"mongodb://u:p%40ss@h/db":                            "mongodb://u:xxxxx@h/db",
		"nats://u:a@h1:4222,nats://v:b@h2:4222":              "nats://u:xxxxx@h1:4222,nats://v:xxxxx@h2:4222",
		"nats://h1:4222,nats://v:b@h2:4222":                  "nats://h1:4222,nats://v:xxxxx@h2:4222",
		"amqp://guest:pa/ss?x@127.0.0.1/":                    "amqp://guest:xxxxx@127.0.0.1/",
		"amqp://guest@127.0.0.1/":                            "amqp://guest@127.0.0.1/",
		"amqp://127.0.0.1:5672/":                             "amqp://127.0.0.1:5672/",
		"postgres://db/test?user=u&password=S3cret&x=1":      "postgres://db/test?user=u&password=xxxxx&x=1",
		"postgres://db/test?sslpassword=S3cret":              "postgres://db/test?sslpassword=xxxxx",
		"https://sqs.local/?X-Amz-Security-Token=abc&Action": "https://sqs.local/?X-Amz-Security-Token=xxxxx&Action",
		// Keyword/value DSNs.
		"host=db user=app password=S3cret dbname=test": "host=db user=app password=xxxxx dbname=test",
		"password=S3cret host=db":                      "password=xxxxx host=db",
		"host=db password = 'S3 cr\\'et' dbname=test":  "host=db password = xxxxx dbname=test",
		"host=db user=app dbname=test":                 "host=db user=app dbname=test",
		"host=db compass=north":                        "host=db compass=xxxxx",
		// go-sql-driver DSNs.
		"app:S3cret@tcp(db:3306)/orders?parseTime=true": "app:xxxxx@tcp(db:3306)/orders?parseTime=true",
		"app:S3c@ret@tcp(db:3306)/orders":               "app:xxxxx@tcp(db:3306)/orders",
		"app:S3cret@unix(/tmp/mysql.sock)/orders":       "app:xxxxx@unix(/tmp/mysql.sock)/orders",
		"root@tcp(127.0.0.1:3306)/test":                 "root@tcp(127.0.0.1:3306)/test",
		"app:S3cret@/orders":                            "app:xxxxx@/orders",
		"root:@tcp(127.0.0.1:3306)/test":                "root:@tcp(127.0.0.1:3306)/test",
		// Texts that hold URLs: error messages.
		`parse "nats://u:S3cret@127.0.0.1:abc": invalid port ":abc" after host`: `parse "nats://u:xxxxx@127.0.0.1:abc": invalid port ":abc" after host`,
		"dial amqp://guest:S3cret@mq:5672/: connection refused":                 "dial amqp://guest:xxxxx@mq:5672/: connection refused",
		"no URL here, user a: b@c":                                              "no URL here, user a: b@c",
		"":                                                                      "",
	} {
		if got := driver.Redact(in); got != want {
			t.Errorf("Redact(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}

// Redact agrees with the standard library on every URL it parses with a
// password.
func TestRedactAgreesWithURLRedacted(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"amqp://guest:S3cret@127.0.0.1:5672/sales", "redis://:S3cret@127.0.0.1:6379/0",
		"postgres://u:p%2Fq@db:5432/test?sslmode=disable", "nats://u:S3cret@[::1]:4222",
	} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := driver.Redact(s), u.Redacted(); got != want {
			t.Errorf("Redact(%q) = %q, url.Redacted %q", s, got, want)
		}
	}
}

func TestRedactText(t *testing.T) {
	t.Parallel()
	conn := "postgres://u:S3%2Fcret@db/test"
	for text, want := range map[string]string{
		"login with S3/cret refused":         "login with xxxxx refused",
		"login with S3%2Fcret refused":       "login with xxxxx refused",
		"bad url postgres://u:S3%2Fcret@db/": "bad url postgres://u:xxxxx@db/",
		"other url amqp://g:other@mq/":       "other url amqp://g:other@mq/",
		"nothing secret":                     "nothing secret",
	} {
		if got := driver.RedactText(text, conn); got != want {
			t.Errorf("RedactText(%q) = %q, want %q", text, got, want)
		}
	}
	if got := driver.RedactError(errors.New("dial amqp://g:other@mq/"), conn).Error(); got != "dial amqp://g:xxxxx@mq/" {
		t.Errorf("RedactError leaves the password of a URL it was not given: %q", got)
	}
	if got := driver.RedactText("pw S3 cr'et!", "host=db password='S3 cr\\'et'"); got != "pw xxxxx!" {
		t.Errorf("a quoted keyword/value password: %q", got)
	}
	if got := driver.RedactText("secret app:pw-1 at db", "app:pw-1@tcp(db:3306)/x"); strings.Contains(got, "pw-1") {
		t.Errorf("a go-sql-driver password: %q", got)
	}
}

func TestRedactError(t *testing.T) {
	t.Parallel()
	conn := "nats://u:S3cret@127.0.0.1:abc"
	//lint:ignore SA1007 the port does not parse on purpose: the test needs url.Parse's error
	_, perr := url.Parse(conn)
	err := fmt.Errorf("nats: %w", perr)
	red := driver.RedactError(err, conn)
	if strings.Contains(red.Error(), "S3cret") || !strings.Contains(red.Error(), "nats: parse") {
		t.Errorf("RedactError = %q", red)
	}
	var ue *url.Error
	if !errors.As(red, &ue) || !errors.Is(red, perr) {
		t.Errorf("RedactError(%v) hides the error it wraps", err)
	}
	if got := driver.RedactError(fs.ErrNotExist, conn); got != fs.ErrNotExist {
		t.Errorf("an error without a password changed: %v", got)
	}
	if driver.RedactError(nil, conn) != nil {
		t.Error("RedactError(nil) != nil")
	}
}

func FuzzRedact(f *testing.F) {
	for _, s := range []string{"amqp://g:p@h/", "host=db password='a b'", "u:p@tcp(h)/d", "x?token=1&a"} {
		f.Add(s, "S3cret")
	}
	f.Fuzz(func(t *testing.T, shape, pw string) {
		if pw == "" || strings.ContainsAny(pw, "@/:?&#'\" \t\r\n\\<>`=") || strings.Contains(driver.Redacted, pw) {
			return
		}
		for _, conn := range []string{
			"amqp://user:" + pw + "@host/" + shape,
			"user:" + pw + "@tcp(host:3306)/db",
			"host=db password=" + pw + " " + shape,
			"postgres://h/db?password=" + pw + "&" + shape,
		} {
			if strings.Count(conn, pw) != 1 || strings.Contains("error: ", pw) {
				continue // the password is also part of the rest
			}
			if got := driver.Redact(conn); strings.Contains(got, pw) {
				t.Errorf("Redact(%q) = %q shows the password", conn, got)
			}
			if got := driver.RedactText("error: "+pw+" "+shape, conn); strings.Contains(got, pw) {
				t.Errorf("RedactText shows the password of %q: %q", conn, got)
			}
		}
	})
}

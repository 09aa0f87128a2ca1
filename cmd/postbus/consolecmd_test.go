package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// postbus console serves the console until its ctx ends.
func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	p := bus.NewMemoryPersistence()
	seed(t, p)
	var out, errb bustest.LogBuffer
	a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, now: fixedNow, open: memoryOpener(p, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- a.run(ctx, []string{"console", "--addr", "127.0.0.1:0", "--read-only"}) }()
	re := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(deadline); {
		url = re.FindString(errb.String())
		time.Sleep(10 * time.Millisecond)
	}
	if url == "" {
		t.Fatalf("no address printed: %s", errb.String())
	}
	resp, err := http.Get(url + "scheduled")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "0190f5d6-0000-7000-8000-000000000000") || strings.Contains(string(body), `name="csrf"`) {
		t.Errorf("GET /scheduled: %d, read-only page expected", resp.StatusCode)
	}
	resp, err = http.Post(url+"scheduled/0190f5d6-0000-7000-8000-000000000000/cancel", "application/x-www-form-urlencoded", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST on a read-only console: %d", resp.StatusCode)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit %d: %s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("console did not stop")
	}
}

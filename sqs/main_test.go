package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqsschemas "github.com/aws/aws-sdk-go-v2/service/sqs/schemas"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"
	"go.uber.org/goleak"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/sqs"
)

// The tests run against goaws (github.com/Admiral-Piett/goaws v0.4.5, a tool
// dependency of this module), which TestMain builds with the go command and
// starts as a child process on a free loopback port with a generated
// config. POSTBUS_TEST_GOAWS_URL points the tests at a goaws already running
// instead.
//
// goaws speaks the SQS query protocol only, while the SDK's SQS client
// speaks the JSON protocol SQS uses today; the SDK's own query protocol
// implementation, given the SQS schema, bridges that in the tests (see
// newClients). Real SQS needs nothing of the kind.
var emu struct {
	url string
	err error
	cmd *exec.Cmd
	dir string
}

// httpClient is shared by every SDK client of the tests, so TestMain can
// close its idle connections before the goroutine-leak check.
var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func TestMain(m *testing.M) {
	emu.url, emu.err = startEmulator()
	code := m.Run()
	stopEmulator()
	httpClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const goawsPackage = "github.com/Admiral-Piett/goaws/app/cmd"

func startEmulator() (string, error) {
	if u := os.Getenv("POSTBUS_TEST_GOAWS_URL"); u != "" {
		return u, nil
	}
	dir, err := os.MkdirTemp("", "postbus-goaws-")
	if err != nil {
		return "", err
	}
	emu.dir = dir
	bin := filepath.Join(dir, "goaws")
	build := exec.Command("go", "build", "-o", bin, goawsPackage)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v: %s", goawsPackage, err, out)
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	conf := filepath.Join(dir, "goaws.yaml")
	yaml := fmt.Sprintf(`Local:
  Host: 127.0.0.1
  Port: "%d"
  Region: us-east-1
  AccountID: "000000000000"
  LogToFile: false
  QueueAttributeDefaults:
    VisibilityTimeout: 30
    ReceiveMessageWaitTimeSeconds: 0
    MaximumMessageSize: 262144
`, port)
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		return "", err
	}
	logf, err := os.Create(filepath.Join(dir, "goaws.log"))
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "-config", conf)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", fmt.Errorf("start goaws: %w", err)
	}
	emu.cmd = cmd
	go func() { _ = cmd.Wait(); logf.Close() }()
	u := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := httpClient.Get(u + "/health")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return u, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", errors.New("goaws did not answer on " + u + "/health within 30s")
}

func stopEmulator() {
	if emu.cmd != nil && emu.cmd.Process != nil {
		_ = emu.cmd.Process.Kill()
	}
	if emu.dir != "" {
		time.Sleep(50 * time.Millisecond)
		_ = os.RemoveAll(emu.dir)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// emulatorURL returns the emulator's URL, or skips the test (fails it under
// CI=true) when it could not be started.
func emulatorURL(t testing.TB) string {
	t.Helper()
	if emu.err != nil {
		bustest.SkipOutsideCI(t, "goaws emulator unavailable (set POSTBUS_TEST_GOAWS_URL to use a running one): %v", emu.err)
	}
	return emu.url
}

func awsConfig(endpoint string) aws.Config {
	return aws.Config{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   httpClient,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "postbus-tests"}, nil
		}),
	}
}

// newClients returns SQS and SNS clients of the emulator. The SQS client
// uses the query protocol, the only one goaws understands.
func newClients(t testing.TB) (*awssqs.Client, *sns.Client) {
	t.Helper()
	cfg := awsConfig(emulatorURL(t))
	sc := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) {
		o.Protocol = awsquery.New(sqsschemas.AmazonSQS)
	})
	return sc, sns.NewFromConfig(cfg)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newTransport returns a transport with a name prefix of its own, whose
// queues are deleted when the test ends.
func newTransport(t testing.TB, opts sqs.Options) *sqs.Transport {
	t.Helper()
	sc, nc := newClients(t)
	if opts.NamePrefix == "" {
		opts.NamePrefix = bustest.Namespace() + "-"
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	tr, err := sqs.New(sc, nc, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { deletePrefixed(t, sc, opts.NamePrefix) })
	return tr
}

// deletePrefixed deletes the queues whose names start with prefix.
func deletePrefixed(t testing.TB, sc *awssqs.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := sc.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix)})
	if err != nil {
		t.Errorf("cleanup: list queues: %v", err)
		return
	}
	for _, u := range out.QueueUrls {
		if !strings.HasPrefix(u[strings.LastIndexByte(u, '/')+1:], prefix) {
			continue
		}
		if _, err := sc.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)}); err != nil {
			t.Errorf("cleanup: delete queue %s: %v", u, err)
		}
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

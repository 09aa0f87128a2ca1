// Package sqstest runs the goaws SQS and SNS emulator
// (github.com/Admiral-Piett/goaws) for tests of code that uses the sqs
// transport, and makes SDK clients for it.
//
// Start installs goaws GoawsVersion with the go command (from the module
// proxy or the module cache) into a temporary directory and runs it as a
// child process on a free loopback port with a generated configuration, so
// nothing needs installing by hand; the go command must be on PATH.
//
// goaws answers only the SQS query protocol, while the SDK's SQS client
// speaks the JSON protocol SQS uses today. Clients gives the SQS client the
// SDK's own query protocol implementation for the SQS schema; real SQS needs
// nothing of the kind.
package sqstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqsschemas "github.com/aws/aws-sdk-go-v2/service/sqs/schemas"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"
)

// GoawsVersion is the goaws release Start runs.
const GoawsVersion = "v0.4.5"

const goawsPackage = "github.com/Admiral-Piett/goaws/app/cmd"

// Region and AccountID are those of the emulated queues and topics.
const (
	Region    = "us-east-1"
	AccountID = "000000000000"
)

// Emulator is a running goaws process, named "goaws" in process listings.
type Emulator struct {
	// URL is the emulator's endpoint, "http://127.0.0.1:<port>".
	URL string

	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// Start installs and starts goaws, and returns once it answers. Stop it
// with Stop.
func Start(ctx context.Context) (*Emulator, error) {
	dir, err := os.MkdirTemp("", "postbus-goaws-")
	if err != nil {
		return nil, err
	}
	e := &Emulator{dir: dir, done: make(chan struct{})}
	if err := e.start(ctx); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Emulator) start(ctx context.Context) error {
	install := exec.CommandContext(ctx, "go", "install", goawsPackage+"@"+GoawsVersion)
	install.Dir = e.dir
	install.Env = append(os.Environ(), "GOBIN="+e.dir, "GOWORK=off", "GOFLAGS=")
	if out, err := install.CombinedOutput(); err != nil {
		return fmt.Errorf("sqstest: go install %s@%s: %v: %s", goawsPackage, GoawsVersion, err, out)
	}
	// go install names the binary after the package directory ("cmd");
	// "goaws" is what process listings should show.
	bin := filepath.Join(e.dir, "goaws")
	if err := os.Rename(filepath.Join(e.dir, "cmd"), bin); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	conf := filepath.Join(e.dir, "goaws.yaml")
	yaml := fmt.Sprintf(`Local:
  Host: 127.0.0.1
  Port: "%d"
  Region: %s
  AccountID: "%s"
  LogToFile: false
  QueueAttributeDefaults:
    VisibilityTimeout: 30
    ReceiveMessageWaitTimeSeconds: 0
    MaximumMessageSize: 262144
`, port, Region, AccountID)
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(e.dir, "goaws.log"))
	if err != nil {
		return err
	}
	e.cmd = exec.Command(bin, "-config", conf)
	e.cmd.Dir = e.dir
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	if err := e.cmd.Start(); err != nil {
		logf.Close()
		e.cmd = nil
		return fmt.Errorf("sqstest: start goaws: %w", err)
	}
	go func() {
		_ = e.cmd.Wait()
		logf.Close()
		close(e.done)
	}()
	e.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-e.done:
			return errors.New("sqstest: goaws exited at start; see " + logf.Name())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := probe.Get(e.URL + "/health")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("sqstest: goaws did not answer on " + e.URL + "/health within 30s")
}

// Stop kills the emulator, waits for it to exit and removes its directory.
func (e *Emulator) Stop() {
	if e.cmd != nil && e.cmd.Process != nil {
		_ = e.cmd.Process.Kill()
		<-e.done
	}
	_ = os.RemoveAll(e.dir)
}

// Config returns an aws.Config for the emulator: its endpoint, Region,
// dummy credentials and httpClient (nil: a new client). Give it a client
// you close, so no idle connection outlives the test.
func (e *Emulator) Config(httpClient *http.Client) aws.Config {
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	return aws.Config{
		Region:       Region,
		BaseEndpoint: aws.String(e.URL),
		HTTPClient:   httpClient,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "sqstest"}, nil
		}),
	}
}

// Clients returns SQS and SNS clients of the emulator (see Config). The SQS
// client uses the query protocol, the only one goaws understands.
func (e *Emulator) Clients(httpClient *http.Client) (*awssqs.Client, *sns.Client) {
	cfg := e.Config(httpClient)
	return awssqs.NewFromConfig(cfg, QueryProtocol), sns.NewFromConfig(cfg)
}

// QueryProtocol makes an SQS client speak the query protocol; pass it to
// sqs.NewFromConfig for a client of goaws.
func QueryProtocol(o *awssqs.Options) {
	o.Protocol = awsquery.New(sqsschemas.AmazonSQS)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

package agent

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// environChildEnv makes TestListenSecretsChild take the agent's secrets
// out of its environment, as `agent --listen` does, then wait.
const environChildEnv = "HUTCH_AGENT_TEST_ENVIRON_CHILD"

// TestListenSecretsLeaveNoTrace: once the agent took its token and TLS
// pair, its environment (what its commands inherit) has none of them,
// and neither has its initial environment block, which /proc/PID/environ
// shows to whoever may read its memory; the rest of the environment
// stays.
func TestListenSecretsLeaveNoTrace(t *testing.T) {
	pair := testutil.NewServerTLS(t, "agent.test")
	cmd := exec.Command(os.Args[0], "-test.run=^TestListenSecretsChild$")
	cmd.Env = append(os.Environ(), environChildEnv+"=1", "KEPT=kept-value",
		TokenEnv+"=the-agent-token", TLSCertEnv+"="+string(pair.CertPEM), TLSKeyEnv+"="+string(pair.KeyPEM))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v\n%s", err, stderr)
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("child said %q (%v)\n%s", line, err, stderr)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	environ := string(b)
	for _, secret := range []string{"the-agent-token", "PRIVATE KEY", "CERTIFICATE", TokenEnv, TLSKeyEnv} {
		if strings.Contains(environ, secret) {
			t.Errorf("/proc/PID/environ still holds %q", secret)
		}
	}
	if !strings.Contains(environ, "\x00KEPT=kept-value\x00") {
		t.Errorf("/proc/PID/environ lost the rest: %q", environ)
	}
}

// TestListenSecretsChild is the child of TestListenSecretsLeaveNoTrace.
func TestListenSecretsChild(t *testing.T) {
	if os.Getenv(environChildEnv) != "1" {
		t.Skip("the child of TestListenSecretsLeaveNoTrace")
	}
	lo, err := listenSecrets()
	if err != nil {
		t.Fatal(err)
	}
	if err := clearInitialEnv(SecretEnv); err != nil {
		t.Fatal(err)
	}
	if lo.Token != "the-agent-token" || lo.TLS == nil || len(lo.TLS.Certificates) != 1 {
		t.Fatalf("listen options %+v", lo)
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "HUTCH_AGENT_") && k != environChildEnv {
			t.Errorf("the environment still has %s", k)
		}
	}
	fmt.Println("ready")
	os.Stdin.Read(make([]byte, 1))
}

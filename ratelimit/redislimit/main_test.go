package redislimit

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests run against a real redis-server that TestMain starts on a free
// loopback port (REDIS_ADDR points at an existing one instead). Without a
// redis-server binary the tests skip, unless REQUIRE_REDIS=1 (set by
// `make test-redis` and CI), which turns the absence into a failure.

var redisAddr string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(m.Run()) // a replica process of TestReplicasProcesses
	}
	addr := os.Getenv("REDIS_ADDR")
	var stop func()
	if addr == "" {
		var err error
		addr, stop, err = startRedis()
		if err != nil {
			if os.Getenv("REQUIRE_REDIS") == "1" {
				fmt.Fprintln(os.Stderr, "redislimit tests need redis-server:", err)
				os.Exit(1)
			}
			fmt.Fprintln(os.Stderr, "skipping redislimit tests:", err)
			os.Exit(0)
		}
	}
	redisAddr = addr
	os.Setenv("REDIS_ADDR", addr)  // for the Example
	redis.SetLogger(quietLogger{}) // the failure tests dial a stopped server on purpose
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.Exit(code)
}

// startRedis starts a throwaway redis-server on 127.0.0.1 with persistence
// off and waits until it answers.
func startRedis() (addr string, stop func(), err error) {
	addr, cmd, err := startRedisProcess()
	if err != nil {
		return "", nil, err
	}
	return addr, func() { cmd.Process.Kill(); cmd.Wait() }, nil
}

// startRedisProcess is startRedis for a test that signals the server (SIGSTOP
// to make it hang): it returns the running process, which the caller kills
// and waits for.
func startRedisProcess() (addr string, cmd *exec.Cmd, err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd = exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				close(ready)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		return "", nil, fmt.Errorf("redis-server did not start")
	}
	return fmt.Sprintf("127.0.0.1:%d", port), cmd, nil
}

// newClient returns a client for the test server and flushes it.
func newClient(t testing.TB) redis.UniversalClient {
	t.Helper()
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{redisAddr}})
	t.Cleanup(func() { c.Close() })
	return c
}

// uniqueKey returns a key no other test uses.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

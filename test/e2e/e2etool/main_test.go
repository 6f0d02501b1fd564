package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/pkg/ready"
)

// echoServer answers every line on a TCP loopback port with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		_ = acceptEach(ln, func(c net.Conn) error {
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
			return nil
		})
	}()
	return ln.Addr().String()
}

func TestRelayUnixToTCP(t *testing.T) {
	target := echoServer(t)
	sock := filepath.Join(daemontest.ShortDir(t), "api.sock")
	ln, err := listen("unix:" + sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- relay(ln, "tcp", target) }()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "hello\n" {
		t.Fatalf("relayed answer %q, %v; want hello", line, err)
	}
	c.Close()
	ln.Close()
	if err := <-done; err != nil {
		t.Fatalf("relay after Close: %v", err)
	}
}

func TestSplitAddr(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:80", "udp:1.2.3.4:5", "tcp:"} {
		if _, _, err := splitAddr(bad); err == nil {
			t.Errorf("splitAddr(%q): no error", bad)
		}
	}
	if n, a, err := splitAddr("tcp:10.244.77.1:6443"); err != nil || n != "tcp" || a != "10.244.77.1:6443" {
		t.Errorf("splitAddr(tcp:...) = %q %q %v", n, a, err)
	}
}

func TestReady(t *testing.T) {
	sock := filepath.Join(daemontest.ShortDir(t), ready.SocketName)
	srv, err := ready.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var out bytes.Buffer
	if err := run([]string{"ready", sock}, &out); err == nil || out.String() != "disconnected\n" {
		t.Fatalf("before Set: %v, printed %q; want an error and disconnected", err, out.String())
	}
	srv.Set(true)
	out.Reset()
	if err := run([]string{"ready", sock}, &out); err != nil || out.String() != "connected\n" {
		t.Fatalf("after Set(true): %v, printed %q; want connected", err, out.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the stall loop and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStallFreezesOnce(t *testing.T) {
	dir := daemontest.ShortDir(t)
	victim := exec.Command("sleep", "30")
	if err := victim.Start(); err != nil {
		t.Skip("no sleep to freeze:", err)
	}
	defer func() { _ = victim.Process.Kill(); _ = victim.Wait() }()
	pidfile, flagFile := filepath.Join(dir, "pid"), filepath.Join(dir, "freeze")
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(victim.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(flagFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "stall.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- stall(ln, pidfile, flagFile, 50*time.Millisecond, &out) }()
	for i := 0; i < 2; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// nothing is ever said on a stalled connection
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, _ := c.Read(make([]byte, 1)); n != 0 {
			t.Fatal("stall answered")
		}
	}
	pid := strconv.Itoa(victim.Process.Pid)
	want := "accepted\nfroze " + pid + "\nthawed " + pid + "\naccepted\n"
	deadline := time.Now().Add(2 * time.Second)
	for out.String() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := out.String(); got != want {
		t.Fatalf("stall printed %q, want %q", got, want)
	}
	if _, err := os.Stat(flagFile); !os.IsNotExist(err) {
		t.Errorf("flag file still there: %v", err)
	}
	state, _ := os.ReadFile("/proc/" + pid + "/stat")
	if f := strings.Fields(string(state)); len(f) > 2 && f[2] == "T" {
		t.Errorf("victim still stopped: %s", state)
	}
	ln.Close()
	if err := <-done; err != nil {
		t.Fatalf("stall after Close: %v", err)
	}
}

package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

func TestKind(t *testing.T) {
	r, _ := newRuntime(t, Config{})
	if r.Kind() != "plugin" {
		t.Fatalf("Kind %q", r.Kind())
	}
}

// TestCompile covers the checks of Compile: checksum pinning and the file
// itself.
func TestCompile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, content []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	content := []byte("#!/bin/sh\n")
	sum := sha256.Sum256(content)
	other := sha256.Sum256([]byte("something else"))
	exe := write("exe", content, 0o755)
	pinnedOK := write("pinned-ok", content, 0o755)
	pinnedBad := write("pinned-bad", content, 0o755)
	plain := write("plain", content, 0o644)
	empty := write("empty", nil, 0o755)
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// Checksums are matched by absolute path, whatever form the key has.
	rel, err := filepath.Rel(mustGetwd(t), pinnedOK)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := newRuntime(t, Config{Checksums: map[string]string{
		rel:       strings.ToUpper(hex.EncodeToString(sum[:])),
		pinnedBad: hex.EncodeToString(other[:]),
	}})
	for _, tc := range []struct {
		name string
		file string
		src  []byte
		msg  string // "" = compiles
	}{
		{"unpinned", exe, content, ""},
		{"pinned, matches", pinnedOK, content, ""},
		{"pinned, differs", pinnedBad, content,
			"checksum mismatch: the file's sha256 is " + hex.EncodeToString(sum[:]) + ", the configured checksum is " + hex.EncodeToString(other[:])},
		{"not executable", plain, content, "not executable (mode -rw-r--r--)"},
		{"empty", empty, nil, "empty file"},
		{"directory", sub, content, "not a regular file"},
		{"missing", filepath.Join(dir, "missing"), content, "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := r.Compile(context.Background(), tc.file, tc.src)
			if tc.msg == "" {
				if err != nil || p == nil {
					t.Fatalf("Compile: %v", err)
				}
				return
			}
			var ce *abi.CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want *abi.CompileError", err, err)
			}
			if ce.File != tc.file || !strings.Contains(ce.Msg, tc.msg) {
				t.Errorf("error %q; want file %s and %q", err, tc.file, tc.msg)
			}
		})
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

func TestNewRejectsBadChecksum(t *testing.T) {
	for _, sum := range []string{"xyz", "abcd", strings.Repeat("0", 63)} {
		_, err := New(Config{Checksums: map[string]string{"rules/x": sum}})
		if err == nil || !strings.Contains(err.Error(), "rules/x") || !strings.Contains(err.Error(), "not a SHA-256") {
			t.Errorf("checksum %q: error %v", sum, err)
		}
	}
}

// TestProtoPathIsQualified: the proto file is registered under a path
// derived from its package, so it cannot collide with another .proto
// linked into the same binary (two upstream go-plugin examples both
// register "proto/kv.proto" and panic when linked together).
func TestProtoPathIsQualified(t *testing.T) {
	const path = "ssrun/plugin/v1/plugin.proto"
	fd, err := protoregistry.GlobalFiles.FindFileByPath(path)
	if err != nil {
		t.Fatalf("%s not registered: %v", path, err)
	}
	if pkg := string(fd.Package()); pkg != "ssrun.plugin.v1" || !strings.HasPrefix(fd.Path(), strings.ReplaceAll(pkg, ".", "/")+"/") {
		t.Errorf("path %s, package %s: the path must start with the package's folders", fd.Path(), pkg)
	}
	if pb.File_ssrun_plugin_v1_plugin_proto.Path() != path {
		t.Errorf("generated file path %s", pb.File_ssrun_plugin_v1_plugin_proto.Path())
	}
	for _, svc := range []string{"ssrun.plugin.v1.Rule", "ssrun.plugin.v1.Host"} {
		if _, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc)); err != nil {
			t.Errorf("service %s: %v", svc, err)
		}
	}
}

func TestLineWriter(t *testing.T) {
	long := strings.Repeat("x", maxLine+10)
	for _, tc := range []struct {
		name   string
		writes []string
		want   []string // after the writes
		flush  []string // added by Flush
	}{
		{"lines", []string{"a\nb\n"}, []string{"a", "b"}, nil},
		{"split writes", []string{"a", "b\nc"}, []string{"ab"}, []string{"c"}},
		{"crlf and empty", []string{"a\r\n\n"}, []string{"a", ""}, nil},
		{"long line", []string{long + "\n"}, []string{long[:maxLine], long[maxLine:]}, nil},
		{"long partial", []string{long}, []string{long[:maxLine]}, []string{long[maxLine:]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			w := newLineWriter(func(l string) { got = append(got, l) })
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("lines %s, want %s", brief(got), brief(tc.want))
			}
			got = nil
			w.Flush()
			if !slices.Equal(got, tc.flush) {
				t.Errorf("flushed %s, want %s", brief(got), brief(tc.flush))
			}
		})
	}
}

// TestRawStderrLevels: how lines of a plugin's original stderr reach the
// rule's log.
func TestRawStderrLevels(t *testing.T) {
	h := abitest.New()
	w := rawStderr(h)
	_, _ = w.Write([]byte(`plain
{"@level":"debug","@message":"plugin address","@timestamp":"x","network":"unix","n":1}
{"@level":"bogus","@message":"odd level"}
{"no":"message"}
{not json
panic: boom
goroutine 1 [running]:
`))
	want := []abitest.LogLine{
		{Level: abi.LevelWarn, Msg: "plain"},
		{Level: abi.LevelDebug, Msg: "plugin address n=1 network=unix"},
		{Level: abi.LevelInfo, Msg: "odd level"},
		{Level: abi.LevelWarn, Msg: `{"no":"message"}`},
		{Level: abi.LevelWarn, Msg: "{not json"},
		{Level: abi.LevelError, Msg: "panic: boom"},
		{Level: abi.LevelError, Msg: "goroutine 1 [running]:"},
	}
	if got := h.Logs(); !slices.Equal(got, want) {
		t.Errorf("rule log:\n%v\nwant:\n%v", got, want)
	}
}

// brief shows lines short: each as its length and first bytes.
func brief(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "[%d %.8q] ", len(l), l)
	}
	return b.String()
}

// TestHCLogger: go-plugin's hclog lines reach slog at the mapped level, with
// the logger's name and implied arguments.
func TestHCLogger(t *testing.T) {
	logs := &testutil.Buffer{}
	l := newHCLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if l.GetLevel() != hclog.Debug || l.IsTrace() || !l.IsDebug() {
		t.Errorf("level %v, trace %t", l.GetLevel(), l.IsTrace())
	}
	l.Named("stdio").With("id", 7).Error("plugin process exited", "error", "signal: killed")
	l.Info("starting plugin")
	l.Trace("not shown")
	l.StandardLogger(nil).Print("via log")
	for _, want := range []string{
		`level=ERROR msg="plugin process exited" logger=stdio id=7 error="signal: killed"`,
		`level=DEBUG msg="starting plugin"`,
		`level=INFO msg="via log"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs.String(), "not shown") {
		t.Errorf("trace line logged at debug level:\n%s", logs)
	}
}

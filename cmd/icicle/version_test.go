package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRevision(t *testing.T) {
	stamped := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	const sha = "7ee6390c0ffee0000000000000000000000000aa"
	tests := []struct {
		name   string
		linked string
		info   *debug.BuildInfo
		want   string
	}{
		{"stamped from git", "", stamped("vcs", "git", "vcs.revision", sha, "vcs.modified", "false"), sha},
		{"uncommitted changes", "", stamped("vcs.revision", sha, "vcs.modified", "true"), sha + " (modified)"},
		{"no vcs stamp", "", stamped("-tags", "ort,tokenizers"), "unknown"},
		{"no build info", "", nil, "unknown"},
		{"set at link time wins", "abc123", stamped("vcs.revision", sha), "abc123"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, revision(tt.linked, tt.info))
		})
	}
	require.Equal(t, "ort,tokenizers", buildTags(stamped("-tags", "ort,tokenizers")))
	require.Equal(t, "none", buildTags(stamped("vcs.revision", sha)))
	require.Equal(t, "none", buildTags(nil))
}

func TestPrintVersion(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, printVersion(nil, &out))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 4, out.String())
	require.Equal(t, "icicle "+version, lines[0])
	require.True(t, strings.HasPrefix(lines[1], "commit: "), lines[1])
	require.NotEqual(t, "commit: ", lines[1])
	require.Equal(t, "go: "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH, lines[2])
	require.True(t, strings.HasPrefix(lines[3], "build tags: "), lines[3])

	require.ErrorContains(t, printVersion([]string{"extra"}, &out), `unexpected argument "extra"`)
	require.Error(t, printVersion([]string{"-nosuchflag"}, &out))
}

// TestVersionSetAtLinkTime builds the command as scripts/build.sh does, with -ldflags -X (pure Go here, no
// native libraries needed), and runs "icicle version": the linked version and commit are what it prints.
func TestVersionSetAtLinkTime(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "icicle")
	build := exec.CommandContext(t.Context(), "go", "build", "-buildvcs=false", "-tags", "testtag",
		"-ldflags", "-X main.version=9.8.7-test -X main.commit=0123abc", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	msg, err := build.CombinedOutput()
	require.NoError(t, err, "%s", msg)

	got, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
	require.NoError(t, err, "%s", got)
	require.Equal(t, "icicle 9.8.7-test\ncommit: 0123abc\ngo: "+runtime.Version()+" "+runtime.GOOS+"/"+
		runtime.GOARCH+"\nbuild tags: testtag\n", string(got))

}

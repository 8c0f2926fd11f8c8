package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release this binary is; scripts/build.sh and the image's build set it at link time:
//
//	go build -ldflags "-X main.version=0.1.0" ./cmd/icicle
var version = "0.1.0-dev"

// commit, when set at link time (-X main.commit=<sha>, as scripts/build.sh does from git), names the source
// revision; otherwise the revision go build stamped into the binary is read, absent with -buildvcs=false or
// in an image built from a context without .git.
var commit = ""

// printVersion is "icicle version": the release, the source revision, the Go toolchain and build tags.
// It reads only what the binary carries: no configuration, no native library.
func printVersion(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: icicle version\n\nPrints the version, source commit and Go version.")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (version takes none)", fs.Arg(0))
	}
	info, _ := debug.ReadBuildInfo()
	_, err := fmt.Fprintf(out, "icicle %s\ncommit: %s\ngo: %s %s/%s\nbuild tags: %s\n", version,
		revision(commit, info), runtime.Version(), runtime.GOOS, runtime.GOARCH, buildTags(info))
	return err
}

// revision is the commit set at link time, else the one Go stamped from git (vcs.revision, with
// " (modified)" when the tree had uncommitted changes), else "unknown" (go test, go run, -buildvcs=false).
func revision(linked string, info *debug.BuildInfo) string {
	if linked != "" {
		return linked
	}
	if info == nil {
		return "unknown"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case modified == "true":
		return rev + " (modified)"
	}
	return rev
}

// buildTags are the -tags the binary was built with ("ort,tokenizers" for a build that runs the models),
// or "none".
func buildTags(info *debug.BuildInfo) string {
	if info != nil {
		for _, s := range info.Settings {
			if s.Key == "-tags" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "none"
}

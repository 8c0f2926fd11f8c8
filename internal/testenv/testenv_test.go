package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMissing runs a child test that calls Missing, once with ICICLE_REQUIRE_REAL=1 (it must fail)
// and once without (it must skip).
func TestMissing(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		Missing(t, "no widget (set WIDGET)")
		t.Error("Missing returned")
		return
	}
	tests := []struct {
		name, require string
		wantFail      bool
		wantText      string
	}{
		{"required fails", "1", true, "--- FAIL: TestMissing"},
		{"not required skips", "", false, "--- SKIP: TestMissing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestMissing$", "-test.v")
			cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", RequireRealEnv+"="+tc.require)
			out, err := cmd.CombinedOutput()
			if tc.wantFail != (err != nil) {
				t.Fatalf("child failed = %v, want %v:\n%s", err != nil, tc.wantFail, out)
			}
			if !strings.Contains(string(out), tc.wantText) || !strings.Contains(string(out), "no widget (set WIDGET)") {
				t.Fatalf("child output lacks %q and the reason:\n%s", tc.wantText, out)
			}
		})
	}
}

package jail

import (
	"context"
	"os/exec"
	"testing"
)

// BenchmarkTrueInJail runs /bin/true in a warm jail; compare with
// BenchmarkTrueForkExec (go test -bench True ./jail).
func BenchmarkTrueInJail(b *testing.B) {
	j, err := Start(context.Background(), Config{Workspace: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	env, _ := Env(nil, nil)
	b.ResetTimer()
	for b.Loop() {
		if code, err := j.Run(context.Background(), Cmd{Args: []string{"/bin/true"}, Env: env}); err != nil || code != 0 {
			b.Fatal(code, err)
		}
	}
}

// BenchmarkTrueForkExec runs /bin/true with a plain fork and exec.
func BenchmarkTrueForkExec(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

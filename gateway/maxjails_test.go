package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
)

// TestMaxJailsUnderLoad: four threads run commands and jobs at once on a
// gateway bounded to two live jails. Every command either runs to its
// end or is refused with 503 naming the limit: a jail is never stopped
// under a command or a job that runs in it (which would end it with 137),
// and the live jails never pass the bound.
func TestMaxJailsUnderLoad(t *testing.T) {
	env := startEnv(t, Config{MaxJails: 2})
	ctx := context.Background()
	threads := []string{"j1", "j2", "j3", "j4"}
	for _, th := range threads {
		if _, err := env.c.Bind(ctx, "acme", th); err != nil {
			t.Fatal(err)
		}
	}
	const rounds = 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ran      int
		refused  int
		failures []string
	)
	note := func(what string, err error, code int) {
		mu.Lock()
		defer mu.Unlock()
		var apiErr *api.APIError
		switch {
		case err == nil && code == 0:
			ran++
		case errors.As(err, &apiErr) && apiErr.Code == api.CodeUnavailable && strings.Contains(apiErr.Message, "(--max-jails)"):
			refused++
		default:
			failures = append(failures, fmt.Sprintf("%s: exit %d, %v", what, code, err))
		}
	}
	for _, th := range threads {
		wg.Go(func() {
			for i := range rounds {
				// A refused command is tried again, after a pause that
				// paces the load (no result depends on it), a few times.
				for try := 0; ; try++ {
					var out strings.Builder
					code, err := env.c.Exec(ctx, "acme", th, api.ExecRequest{Command: fmt.Sprintf("echo %d > r; cat r", i)}, &out, nil)
					if err == nil && code == 0 && out.String() != fmt.Sprintf("%d\n", i) {
						err = fmt.Errorf("output %q", out.String())
					}
					note(fmt.Sprintf("exec %d in %s", i, th), err, code)
					if !errors.Is(err, api.ErrUnavailable) || try == 50 {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				if live, max := env.g.jails.Live(); live > max {
					note("bound", fmt.Errorf("%d jails live, past %d", live, max), -1)
				}
				if i%3 == 0 {
					job, err := env.c.Spawn(ctx, "acme", th, api.SpawnRequest{Command: "true"})
					if err != nil {
						note(fmt.Sprintf("spawn %d in %s", i, th), err, -1)
						continue
					}
					code, err := jobExit(ctx, env, th, job.ID)
					note(fmt.Sprintf("job %d in %s", i, th), err, code)
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d commands failed (ran %d, refused %d):\n%s", len(failures), ran, refused, strings.Join(failures, "\n"))
	}
	if ran == 0 {
		t.Fatalf("no command ran (refused %d)", refused)
	}
	t.Logf("ran %d, refused %d", ran, refused)
	// Once nothing runs, a command in each thread in turn runs: the least
	// recently used jail makes room each time.
	for _, th := range threads {
		var out strings.Builder
		var errOut strings.Builder
		if code, err := env.c.Exec(ctx, "acme", th, api.ExecRequest{Command: "echo " + th}, &out, &errOut); err != nil || code != 0 || out.String() != th+"\n" {
			t.Fatalf("exec in %s, in turn: exit %d, %q, %q, %v", th, code, out.String(), errOut.String(), err)
		}
		if n := env.g.jails.Count(); n > 2 {
			t.Fatalf("%d jails after %s, past the bound of 2", n, th)
		}
	}
	if !strings.Contains(env.logBuf.String(), "jail reclaimed: the bound of live jails") {
		t.Error("no jail was reclaimed for the bound")
	}
}

// jobExit waits for job id of thread th to end and returns its exit
// code; it may run in a goroutine of its own.
func jobExit(ctx context.Context, env *testEnv, th, id string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		info, err := env.c.Job(ctx, "acme", th, id)
		if err != nil {
			return -1, err
		}
		if info.Ended && info.ExitCode != nil {
			return *info.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("job %s did not end: %+v", id, info)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

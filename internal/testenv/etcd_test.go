package testenv

import (
	"net/http"
	"testing"
	"time"
)

// TestEtcdCluster starts a one-member cluster, kills the member and
// restarts it on its data.
func TestEtcdCluster(t *testing.T) {
	e := EtcdCluster(t, 1)
	if got := len(e.Endpoints()); got != 1 {
		t.Fatalf("Endpoints: got %d, want 1", got)
	}
	client := &http.Client{Timeout: time.Second}
	if err := healthy(client, e.Endpoint(0)); err != nil {
		t.Fatalf("a started member: %v", err)
	}
	pid := e.members[0].cmd.Process.Pid
	e.Kill(t, 0)
	if err := healthy(client, e.Endpoint(0)); err == nil {
		t.Fatalf("a killed member still answers")
	}
	e.Restart(t, 0)
	if err := healthy(client, e.Endpoint(0)); err != nil {
		t.Fatalf("a restarted member: %v", err)
	}
	if e.members[0].cmd.Process.Pid == pid {
		t.Errorf("restarted member has the killed one's pid %d", pid)
	}
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"warren/api"
	"warren/gateway/call"
	"warren/meta"
)

// hostsFailStore is the real store whose ListHosts fails with err.
type hostsFailStore struct {
	meta.Store
	err error
}

func (s hostsFailStore) ListHosts(context.Context) ([]meta.Host, error) {
	return nil, fmt.Errorf("list hosts: %w", s.err)
}

// TestStoreUnavailableCode: a store that did not answer (retry) and a
// store or gateway that is closing (give up) reach the client as two
// codes of 503, each matching its own sentinel and not the other's.
func TestStoreUnavailableCode(t *testing.T) {
	for _, c := range []struct {
		name      string
		storeErr  error
		code      string
		want, not error
	}{
		{"store unavailable", meta.ErrUnavailable, "unavailable", api.ErrUnavailable, api.ErrClosed},
		{"store closed", meta.ErrClosed, "closed", api.ErrClosed, api.ErrUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := startEnv(t, Config{Store: hostsFailStore{newStore(t), c.storeErr}})
			_, err := env.c.Hosts(context.Background())
			var apiErr *api.APIError
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || apiErr.Code != c.code {
				t.Fatalf("GET /v1/hosts: got %v, want a 503 %s", err, c.code)
			}
			if !errors.Is(err, c.want) || errors.Is(err, c.not) {
				t.Errorf("got %v: matches %v %v, %v %v; want only the first", err,
					c.want, errors.Is(err, c.want), c.not, errors.Is(err, c.not))
			}
		})
	}
	// The gateway's own shutdown is the closed code too.
	if status, code := call.Classify(fmt.Errorf("bind: %w", api.ErrClosed)); status != http.StatusServiceUnavailable || code != "closed" {
		t.Errorf("a closing gateway: got %d %s, want 503 closed", status, code)
	}
}

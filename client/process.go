package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"warren/api"
)

// JobOutputStream is JobOutput of one view of the output: stream is
// api.JobStreamStdout or api.JobStreamStderr for that stream alone, with
// offsets of its own, or api.JobStreamAll (or "") for both merged. Each
// frame with data says its stream.
func (c *Client) JobOutputStream(ctx context.Context, tenant, thread, id, stream string, offset int64, follow bool, fn func(api.JobFrame) error) error {
	path := threadPath(tenant, thread) + "/jobs/" + escapeID(id) + "/output"
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if stream != "" {
		q.Set("stream", stream)
	}
	if follow {
		q.Set("follow", "true")
	}
	resp, err := c.send(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var f api.JobFrame
		if err := dec.Decode(&f); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("GET %s: the answer ended early: %w", path, err)
		}
		if err := fn(f); err != nil {
			return err
		}
		if f.End || (f.Data == "" && !follow) {
			io.Copy(io.Discard, resp.Body)
			return nil
		}
	}
}

package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"

	"warren/api"
)

type progressKey struct{}

// WithProgress returns ctx with fn to receive the progress of the long
// calls made under it (Checkpoint, Undo, Redo, Revert, Fork,
// DeleteThread), as net/http/httptrace carries its hooks: those calls
// then ask the daemon for a progress stream and call fn with each frame,
// on the calling goroutine, before they return. A frame comes at most
// about ten times a second, and not at all for a call that ends quicker.
func WithProgress(ctx context.Context, fn func(api.Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// doLong is do for a long call: with a progress func in ctx it asks for
// the answer as a progress stream and reads it to its last frame.
func (c *Client) doLong(ctx context.Context, method, path string, body, out any) error {
	fn, _ := ctx.Value(progressKey{}).(func(api.Progress))
	if fn == nil {
		return c.do(ctx, method, path, nil, body, out)
	}
	resp, err := c.send(ctx, method, path, url.Values{"progress": {"1"}}, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(io.LimitReader(resp.Body, maxAnswerBytes), 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			if err == io.EOF {
				return fmt.Errorf("%s %s: the progress stream ended before the call's answer", method, path)
			}
			return fmt.Errorf("%s %s: read answer: %w", method, path, err)
		}
		var f api.ProgressFrame
		if err := json.Unmarshal(line, &f); err != nil {
			return fmt.Errorf("%s %s: decode a progress frame: %w", method, path, err)
		}
		switch {
		case f.Error != nil:
			return f.Error
		case f.Result != nil:
			if err := json.Unmarshal(f.Result, out); err != nil {
				return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
			}
			return nil
		}
		fn(f.Progress)
	}
}

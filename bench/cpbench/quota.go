package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"

	"warren/api"
	"warren/bench/internal/cpkit"
	"warren/client"
	"warren/meta"
)

// quotaMeasure has a thread with a snapshot quota of quotaMiB rewrite a
// file of sizeMiB and checkpoint after each of rewrites turns, and prints
// the snapshot bytes it holds then against its quota (issue 30: without
// a quota such a thread held 74 times its disk quota after 95 turns).
func quotaMeasure(ctx context.Context, c *client.Client, rewrites, sizeMiB, quotaMiB int) {
	const mib = 1 << 20
	const tenant, thread = "bench", "rewrites"
	quota := int64(quotaMiB) * mib
	if _, err := c.BindWith(ctx, tenant, thread, meta.Settings{SnapshotBytes: quota}); err != nil {
		log.Fatalf("bind: %v", err)
	}
	buf := make([]byte, sizeMiB*mib)
	rng := rand.NewChaCha8([32]byte{30})
	refused, most := 0, int64(0)
	for r := range rewrites {
		rng.Read(buf)
		if _, err := c.Files().WriteRaw(ctx, tenant, thread, api.RawRequest{Path: "big.bin"}, bytes.NewReader(buf)); err != nil {
			log.Fatalf("rewrite %d: %v", r, err)
		}
		_, err := c.History().Checkpoint(ctx, tenant, thread, api.CheckpointRequest{Label: fmt.Sprint("rewrite ", r)})
		var ae *api.APIError
		switch {
		case errors.As(err, &ae) && ae.Code == api.CodeQuota:
			refused++
		case err != nil:
			log.Fatalf("checkpoint %d: %v", r, err)
		}
		u, err := c.Usage(ctx, tenant, thread)
		if err != nil {
			log.Fatalf("usage: %v", err)
		}
		most = max(most, u.SnapshotBytes)
	}
	u, err := c.Usage(ctx, tenant, thread)
	if err != nil {
		log.Fatalf("usage: %v", err)
	}
	fmt.Println()
	fmt.Printf("snapshot bytes after %d rewrites of %d MiB: %.1f MiB in %d checkpoints, quota %d MiB (most held %.1f MiB, %d refused): %s\n",
		rewrites, sizeMiB, float64(u.SnapshotBytes)/mib, u.Checkpoints, quotaMiB, float64(most)/mib, refused, cpkit.Verdict(most <= quota))
	if err := c.DeleteThread(ctx, tenant, thread); err != nil {
		log.Fatalf("delete: %v", err)
	}
}

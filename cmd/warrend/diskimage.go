package main

import (
	"fmt"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"warren/gateway"
	"warren/internal/diskimage"
	"warren/internal/diskquota"
)

// Defaults of the quotas on the disk image (docs/operations.md, "The disk
// image"), where --disk-reserve and --disk-quota are not given: the image
// keeps a twentieth of itself (at least imageMinReserve) free of
// workspaces and snapshot repositories, for the filesystem's own trees, and one
// thread may take at most nine tenths of what the workspaces may use
// together, so that a thread that fills its disk leaves the others room
// to write.
const (
	imageMinReserve = 64 << 20
	imageMinQuota   = 16 << 20
)

// diskImageOptions are the options of the disk image that the flags of
// warren serve give, for the data folder dataDir; loopControl is
// $WARREN_LOOP_CONTROL ("" for the machine's).
func diskImageOptions(dataDir, mode string, size int64, workspaces, snapshots, loopControl string) diskimage.Options {
	return diskimage.Options{
		DataDir:     dataDir,
		Mode:        mode,
		SizeBytes:   size,
		Workspaces:  workspaces,
		Snapshots:   snapshots,
		LoopControl: loopControl,
	}
}

// startDiskImage decides whether the workspaces (and snapshots) go on the
// data folder's disk image, says so in the log ("disk unprotected" and
// why where they do not), mounts the image, and sets cfg's default quota
// and reserve for it. It returns nil where no image is used.
func startDiskImage(log hclog.Logger, o diskimage.Options, cfg *gateway.Config) (*diskimage.Image, error) {
	plan, err := diskimage.Decide(o)
	if err != nil {
		return nil, err
	}
	if !plan.Use {
		if plan.Native && cfg.DiskReserveBytes > 0 {
			log.Info("disk protected: the workspaces' btrfs quota groups keep the reserve", "reserve", cfg.DiskReserveBytes)
			return nil, nil
		}
		reason := plan.Reason
		if plan.Native {
			reason += ", and it is not given"
		}
		log.Warn("disk unprotected: a thread that fills the disk makes the others' writes, binds and closes fail", "reason", reason)
		return nil, nil
	}
	im, err := diskimage.Open(log.Named("diskimage"), o, plan)
	if err != nil {
		return nil, err
	}
	if cfg.DiskReserveBytes == 0 {
		cfg.DiskReserveBytes = max(plan.Size/20, imageMinReserve)
	}
	if cfg.DiskQuotaBytes == 0 {
		// Nine tenths of what the reserve leaves the workspaces
		// together: what they use plus what btrfs says is free (its
		// metadata copies take part of the image), less the reserve.
		q, err := diskquota.Open(filepath.Join(o.DataDir, "workspaces"))
		if err != nil {
			return nil, closeDiskImage(im, fmt.Errorf("disk image: %w", err))
		}
		limit, err := q.Reserve(cfg.DiskReserveBytes)
		if err != nil {
			return nil, closeDiskImage(im, fmt.Errorf("disk image: %w", err))
		}
		cfg.DiskQuotaBytes = max(int64(limit)/10*9, imageMinQuota)
	}
	log.Info("disk protected: workspaces on the data folder's disk image", "image", plan.Image, "bytes", plan.Size,
		"device", im.Device(), "reserve", cfg.DiskReserveBytes, "thread_quota", cfg.DiskQuotaBytes)
	return im, nil
}

// closeDiskImage unmounts the image at stop, after the gateway and the
// store are closed.
func closeDiskImage(im *diskimage.Image, err error) error {
	if im == nil {
		return err
	}
	if cerr := im.Close(); cerr != nil && err == nil {
		return fmt.Errorf("stop: %w", cerr)
	}
	return err
}

package jail

import (
	"path"
	"strings"
)

// A jail's root is either the host's system folders (Config.ReadOnly,
// bound read-only on a tmpfs) or an image's root filesystem
// (Config.Image): a folder the image store unpacked, bound read-only as
// the jail's / itself (image_linux.go). Either way the jail holds the
// same mounts at the same places (the workspace, /tmp, /home/agent, /dev,
// /proc) and the same fences (no_new_privs, seccomp, Landlock, limits).
//
// Of an image's config a jail honours:
//
//   - Env, which joins the commands' environment below warren's own
//     variables (EnvFor);
//   - WorkingDir, where a command with no Dir starts, if it lies in the
//     workspace (Image.WorkDir);
//   - User, but only as the name of the jail's passwd entry: the
//     commands run as the jail's unprivileged uid whatever the image
//     says (never root, never a uid the image picked). What the image
//     gave its user (/home/node...) stays read-only to them, like the
//     rest of the image.
//
// Nothing else (entrypoint, cmd, volumes, exposed ports) means anything
// to a jail: commands come from the gateway.

// Image is an image's root filesystem and the parts of its config a jail
// honours.
type Image struct {
	// Root is the host folder of the unpacked root filesystem. It holds
	// the mount points of ImageMountPoints, made by the image store, and
	// is root's: the jail binds it read-only.
	Root string
	// Env is the image's environment, KEY=VALUE (see EnvFor).
	Env []string
	// WorkingDir is honoured only inside /workspace, else ignored
	// (WorkDir).
	WorkingDir string
	// User is the image's user ("node", "1000", "1000:1000", "node:staff";
	// "" is root): it names the jail's passwd entry when it is a name.
	User string
}

// ImageMountPoints says which folders and files an image's root must hold
// for a jail to mount over: the image store makes them (empty), as a jail
// cannot make them in a read-only root. Each must be a real folder or a
// regular file, not a link: a link would lead a mount elsewhere, and a
// jail whose image lacks one refuses to start.
func ImageMountPoints() (dirs, files []string) {
	return []string{Workspace, Tmp, "/dev", "/proc", Home},
		[]string{"/etc/resolv.conf", "/etc/hosts", "/etc/passwd", "/etc/group"}
}

// WorkDir is where a command with no Dir starts in a jail on img: the
// image's WorkingDir when it is the workspace or a folder in it, else the
// workspace (a WorkingDir elsewhere names a folder of the read-only image,
// where a command could write nothing). A nil img means the workspace.
// A WorkingDir missing in the thread's workspace is not replaced: the
// command fails to start there, rather than run somewhere else.
func (img *Image) WorkDir() string {
	if img == nil || !path.IsAbs(img.WorkingDir) {
		return Workspace
	}
	dir := path.Clean(img.WorkingDir)
	if dir != Workspace && !strings.HasPrefix(dir, Workspace+"/") {
		return Workspace
	}
	return dir
}

// defaultUserName names the jail's user when the image's User is not a
// name.
const defaultUserName = "agent"

// userNames returns the names of the jail's passwd and group entries for
// an image's User: its user part when that is a name, else "agent"; its
// group part when that is a name, else the user's name (a group of its
// own, as useradd makes).
func userNames(user string) (userName, groupName string) {
	u, g, _ := strings.Cut(user, ":")
	userName = defaultUserName
	if isAccountName(u) {
		userName = u
	}
	groupName = userName
	if isAccountName(g) {
		groupName = g
	}
	return userName, groupName
}

// isAccountName says whether s is a name passwd and group lines can hold
// and programs take for a name: the portable set (letters, digits, _ . -,
// not first a digit or -), at most 32 bytes. A number is a uid, not a
// name.
func isAccountName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c >= '0' && c <= '9', c == '.', c == '-':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

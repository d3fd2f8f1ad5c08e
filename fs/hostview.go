package fs

// A host's view of a workspace (the thread's mount path, inspection
// mounts) is mounted nosymfollow: the kernel follows no symlink in it, and
// answers ELOOP instead. An agent makes the links, and where the kernel's
// walk of a link ends depends on things no check at readlink time can pin
// (link.go); a root process on the host that followed one could read or
// write anything. Links are still there, and read as links; the file API
// follows them inside the root. The jail binds the mount without the flag.
// Every mount is checked for the flag in the mount table once it is made,
// and taken down without it (checkAttrs, target_linux.go).

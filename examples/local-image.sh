#!/usr/bin/env bash
# Makes the image the quick tour's Docker machine runs, `berth-example:busybox`, on the local Docker
# Engine and from nothing a registry serves: a root file system holding a statically linked busybox
# (found on PATH or at /bin/busybox; Debian's and Ubuntu's `busybox-static` package installs one)
# with its applets as links, imported with `docker import`. Running it again keeps the image there.
#
#   examples/local-image.sh            # or BUSYBOX=/path/to/static/busybox examples/local-image.sh
set -euo pipefail

image=berth-example:busybox

if ! docker info >/dev/null 2>&1; then
  echo "local-image.sh: no Docker Engine answers (docker info failed); the Docker machine needs one" >&2
  exit 1
fi
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "$image is already on the Engine"
  exit 0
fi

busybox=${BUSYBOX:-}
if [ -z "$busybox" ]; then
  for candidate in "$(command -v busybox 2>/dev/null || true)" /bin/busybox /usr/bin/busybox; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
      busybox=$candidate
      break
    fi
  done
fi
if [ -z "$busybox" ]; then
  echo "local-image.sh: no busybox found; install a static one (apt-get install busybox-static) or set BUSYBOX" >&2
  exit 1
fi
# An image with nothing else in it needs a binary that needs nothing else: no dynamic loader, no libc.
if ldd "$busybox" >/dev/null 2>&1; then
  echo "local-image.sh: $busybox is dynamically linked; a FROM-nothing image needs a static one (apt-get install busybox-static)" >&2
  exit 1
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/tmp" "$root/var/lib/berth"
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
done
tar -C "$root" -c . | docker import --change 'ENV PATH=/bin' --change 'CMD ["/bin/sh"]' - "$image" >/dev/null
echo "made $image from $busybox ($(docker image inspect --format '{{.Size}}' "$image") bytes)"

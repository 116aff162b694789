#!/usr/bin/env bash
# Builds a Prometheus image FROM scratch, for the compose stack's `observability` profile on a machine
# that cannot pull `prom/prometheus` (no registry): Debian's `prometheus` binary (the installed one, or
# the package downloaded from Debian's archive with apt-get, never installed), the shared libraries it
# links and their loader, nothing else.
#
#   deploy/build-prometheus-image.sh      prints the image's name: berth/prometheus:local
#
# Then: BERTH_PROMETHEUS_IMAGE=berth/prometheus:local docker-compose --profile observability up -d prometheus
#
# Settings (environment):
#   BERTH_IMAGE_PREFIX   image name prefix (default: berth/)
set -euo pipefail
cd "$(dirname "$0")/.."

image="${BERTH_IMAGE_PREFIX:-berth/}prometheus:local"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if command -v prometheus >/dev/null 2>&1; then
  binary=$(command -v prometheus)
else
  command -v apt-get >/dev/null 2>&1 || {
    echo "build-prometheus-image: no prometheus binary and no apt-get to download Debian's" >&2
    exit 1
  }
  # Downloaded as a file, not installed: nothing on this machine changes.
  (cd "$work" && { apt-get download -q prometheus || { apt-get update -qq && apt-get download -q prometheus; }; } \
    >/dev/null 2>&1) || {
    echo "build-prometheus-image: apt-get download prometheus failed (run apt-get update first?)" >&2
    exit 1
  }
  dpkg-deb -x "$work"/prometheus_*.deb "$work/deb"
  binary="$work/deb/usr/bin/prometheus"
fi

root="$work/ctx/rootfs"
mkdir -p "$root/bin" "$work/ctx/data"
cp "$binary" "$root/bin/prometheus"
# Every library ldd resolves, and the loader, at the paths the binary asks for them.
ldd "$binary" | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
mkdir -p "$root/etc"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/prometheus:/sbin/nologin\n' \
  >"$root/etc/passwd"
cat >"$work/ctx/Dockerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
COPY --chown=65534:65534 data/ /prometheus/
USER 65534:65534
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
EOF
docker build --quiet -t "$image" "$work/ctx" >/dev/null
"$binary" --version 2>&1 | head -1 >&2
echo "$image"

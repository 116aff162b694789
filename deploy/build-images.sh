#!/usr/bin/env bash
# Builds Berth's container images: statically linked binaries, then one FROM-scratch image per service
# and one for the ECS emulator, tagged with the workspace version and the git commit. Nothing is
# pulled: an image holds only files from this machine (the binary, CA certificates, a passwd file).
#
#   deploy/build-images.sh            build everything, print each image's size
#
# Settings (environment):
#   BERTH_STATIC_TARGET_DIR  where the static build goes (default: <cargo target dir>/static), apart
#                            from the everyday target directory so `cargo test` keeps its cache
#   BERTH_IMAGE_PREFIX       image name prefix (default: berth/), e.g. registry.example.com/berth/
#   BERTH_IMAGE_MAX_MB       fail when an image is larger (default: 25)
#   BERTH_STATIC_PROFILE     the cargo profile of the binaries (default: static); CI's compose
#                            end-to-end uses ci-images, built faster and optimised less
#
# The static binaries are left in $BERTH_STATIC_TARGET_DIR/<triple>/<profile>/.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

arch=$(uname -m)
triple="${arch}-unknown-linux-gnu"
target_dir="${BERTH_STATIC_TARGET_DIR:-${CARGO_TARGET_DIR:-$repo/target}/static}"
profile="${BERTH_STATIC_PROFILE:-static}"
bin_dir="$target_dir/$triple/$profile"
prefix="${BERTH_IMAGE_PREFIX:-berth/}"
max_mb="${BERTH_IMAGE_MAX_MB:-25}"

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# A build from uncommitted changes must not pass for the commit.
if [ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then
  commit="${commit}-dirty"
fi

# name, the binary it runs, the port it listens on, and its listen settings.
images=(
  "gateway gateway 8080"
  "machine-driver machine-driver 8081"
  "orchestrator-registry orchestrator-registry 8082"
  "storage-ops storage-ops 8083"
  "machine-controller machine-controller 8084"
  "ecs-emulator ecs-emulator 8090"
)

if ! docker info >/dev/null 2>&1; then
  echo "build-images: no Docker Engine answers (docker info failed); cannot build images" >&2
  exit 1
fi

echo "== static binaries (profile $profile, $triple, +crt-static) into $target_dir"
started=$(date +%s)
# crt-static on the gnu target: glibc linked in, so the binary runs FROM scratch. --target keeps the
# flag off build scripts and proc macros, which must stay dynamic.
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --profile "$profile" --target "$triple" --target-dir "$target_dir" --locked \
  -p gateway -p machine-driver -p orchestrator-registry -p storage-ops -p machine-controller -p ecs-emulator --bins
build_seconds=$(( $(date +%s) - started ))
echo "   built in ${build_seconds}s"

for bin in gateway machine-driver orchestrator-registry storage-ops machine-controller ecs-emulator; do
  # A dynamic binary names its loader (PT_INTERP); a static one names none.
  if command -v readelf >/dev/null 2>&1 && readelf -l "$bin_dir/$bin" | grep -q 'Requesting program interpreter'; then
    echo "build-images: $bin_dir/$bin is dynamically linked; it would not run FROM scratch" >&2
    exit 1
  fi
done

ca_bundle=/etc/ssl/certs/ca-certificates.crt
if [ ! -s "$ca_bundle" ]; then
  echo "build-images: no CA bundle at $ca_bundle (Debian: apt-get install ca-certificates)" >&2
  exit 1
fi

stage_root="$target_dir/images"
rm -rf "$stage_root"
for spec in "${images[@]}"; do
  read -r name bin port <<<"$spec"
  ctx="$stage_root/$name"
  mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/tmp" "$ctx/data" "$ctx/credentials"
  cp "$bin_dir/$bin" "$ctx/$bin"
  cp "$ca_bundle" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
  # The one user the service runs as (10001, no shell, no login), plus root for tools that look it up.
  printf 'root:x:0:0:root:/root:/sbin/nologin\nberth:x:10001:10001:berth:/data:/sbin/nologin\n' \
    >"$ctx/rootfs/etc/passwd"
  printf 'root:x:0:\nberth:x:10001:\n' >"$ctx/rootfs/etc/group"
  chmod 1777 "$ctx/rootfs/tmp"
  chmod 0700 "$ctx/data" "$ctx/credentials"

  if [ "$name" = ecs-emulator ]; then
    listen_env="BERTH_ECS_EMULATOR_HOST=0.0.0.0 BERTH_ECS_EMULATOR_PORT=$port BERTH_ECS_EMULATOR_STATE_DIR=/data"
  else
    listen_env="BERTH_LISTEN=0.0.0.0:$port BERTH_DATA_DIR=/data"
  fi
  # Generated, not committed: the six differ only in these values, and the exec forms of ENTRYPOINT
  # and HEALTHCHECK cannot take build arguments.
  cat >"$ctx/Dockerfile" <<EOF
FROM scratch
LABEL org.opencontainers.image.title="berth-$name" \\
      org.opencontainers.image.version="$version" \\
      org.opencontainers.image.revision="$commit" \\
      org.opencontainers.image.licenses="Apache-2.0"
COPY rootfs/ /
# /data (state; a volume) and /run/berth (shared credentials; a volume in compose) belong to the
# service's user, and a new named volume takes its owner from the directory it is mounted over.
COPY --chown=10001:10001 data/ /data/
COPY --chown=10001:10001 credentials/ /run/berth/
COPY $bin /usr/local/bin/$bin
ENV PATH=/usr/local/bin $listen_env
USER 10001:10001
WORKDIR /data
EXPOSE $port
HEALTHCHECK --interval=5s --timeout=4s --start-period=10s --retries=3 CMD ["$bin", "healthcheck"]
ENTRYPOINT ["$bin"]
EOF
  echo "== image ${prefix}$name:$version ($commit)"
  # The legacy builder and BuildKit both build FROM scratch without pulling anything.
  docker build --quiet \
    -t "${prefix}$name:$version" -t "${prefix}$name:$version-$commit" "$ctx" >/dev/null
done

echo
echo "== images (static build ${build_seconds}s)"
printf '%-56s %10s\n' IMAGE SIZE
too_big=0
for spec in "${images[@]}"; do
  read -r name _ _ <<<"$spec"
  ref="${prefix}$name:$version-$commit"
  bytes=$(docker image inspect --format '{{.Size}}' "$ref")
  awk -v ref="$ref" -v b="$bytes" 'BEGIN { printf "%-56s %8.1f MB\n", ref, b / 1000000 }'
  if [ "$bytes" -gt $(( max_mb * 1000000 )) ]; then
    echo "build-images: $ref is over ${max_mb} MB" >&2
    too_big=1
  fi
done
exit "$too_big"

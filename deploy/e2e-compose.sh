#!/usr/bin/env bash
# End-to-end test of the compose stack (docker-compose.yml), as a user drives it: build the images,
# `up` the stack, wait for every healthcheck, then through the published gateway, with the `berth`
# CLI and with plain HTTP (curl):
#   - register an orchestrator; create, read, list and delete volumes;
#   - create, status, list and delete a machine on the ECS emulator;
#   - apply a machine deployment, follow its roll, and delete it with its machines;
#   - find one request's trace id in the logs of the gateway, storage-ops and the registry;
#   - restart storage-ops and find every volume still there;
#   - `down` then `up`: registrations, volumes, the machine and the admin token are all still there;
#   - stop the registry: AddStorage is 503 Unavailable with Retry-After; start it: AddStorage works;
#   - the observability profile's Prometheus (built here from Debian's binary) scrapes all six
#     services, the gateway with a metrics token, and holds the series an operator alerts on;
# and `down -v` at the end, whatever failed, checking that no container, network or volume is left.
#
# Where no Docker Engine answers it skips, saying so; with BERTH_REQUIRE_DOCKER=1 (CI) it fails then.
#
# Settings (environment):
#   BERTH_E2E_PORT        the host port the gateway is published on (default 28080, away from 8080)
#   BERTH_E2E_SKIP_BUILD  1: use the images and CLI already built (a rerun after deploy/build-images.sh)
#   COMPOSE               the compose command (default: docker-compose, else `docker compose`)
#
# It is a script rather than a `cargo test`: it needs the static release build and the images, which
# must not run inside every developer's `cargo test --workspace`, and it drives exactly the commands
# the README gives (compose, the CLI, curl). .ci/run calls it after the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
started=$(date +%s)

say() { printf '[e2e %3ss] %s\n' "$(( $(date +%s) - started ))" "$*"; }
# Each step begins with `step`; a failure fails the step under way.
steps=0
step() { steps=$(( steps + 1 )); say "$@"; }
fail() { say "FAIL: $*"; exit 1; }

if ! docker info >/dev/null 2>&1; then
  if [ "${BERTH_REQUIRE_DOCKER:-}" = 1 ]; then
    echo "e2e-compose: no Docker Engine answers (docker info failed), and BERTH_REQUIRE_DOCKER=1" >&2
    exit 1
  fi
  echo "e2e-compose: SKIPPED: no Docker Engine answers (docker info failed)"
  exit 0
fi

if [ -n "${COMPOSE:-}" ]; then
  read -r -a compose_cmd <<<"$COMPOSE"
elif command -v docker-compose >/dev/null 2>&1; then
  compose_cmd=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose_cmd=(docker compose)
else
  fail "neither docker-compose nor \`docker compose\` is installed"
fi

# A project name and port of its own, so nothing else on the machine is touched.
project="berth-e2e-$$"
port="${BERTH_E2E_PORT:-28080}"
export BERTH_GATEWAY_PUBLISH="127.0.0.1:$port"
export BERTH_URL="http://127.0.0.1:$port"
compose() { "${compose_cmd[@]}" -p "$project" -f "$repo/docker-compose.yml" "$@"; }
work=$(mktemp -d)

cleanup() {
  local rc=$?
  set +e
  if [ "$rc" -ne 0 ]; then
    say "failed: the stack's last log lines follow"
    compose logs --no-color --tail=30 2>&1 | sed 's/^/    /'
  fi
  say "down -v"
  compose --profile observability down -v --remove-orphans >/dev/null 2>&1
  local left
  left=$( {
    docker ps -aq --filter "label=com.docker.compose.project=$project"
    docker network ls -q --filter "label=com.docker.compose.project=$project"
    docker volume ls -q --filter "label=com.docker.compose.project=$project"
  } | wc -l)
  if [ "$left" -ne 0 ]; then
    say "FAIL: $left containers, networks or volumes of $project are left behind"
    rc=1
  fi
  rm -rf "$work"
  say "done in $(( $(date +%s) - started ))s: $([ "$rc" -eq 0 ] && echo PASSED || echo FAILED)"
  if [ "$rc" -eq 0 ]; then
    echo "compose e2e: $steps passed, 0 failed"
  else
    echo "compose e2e: $(( steps > 0 ? steps - 1 : 0 )) passed, 1 failed"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "${BERTH_E2E_SKIP_BUILD:-}" != 1 ]; then
  say "building the images (deploy/build-images.sh)"
  deploy/build-images.sh
fi
# The CLI runs on this machine, not in an image: the everyday debug build (already there after
# `cargo test --workspace`) drives the stack as well as a release one.
say "building the CLI (cargo build -p berth)"
cargo build -q -p berth
berth_bin="${CARGO_TARGET_DIR:-$repo/target}/debug/berth"
[ -x "$berth_bin" ] || fail "no CLI at $berth_bin"
berth() { "$berth_bin" "$@"; }
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
export BERTH_IMAGE_TAG="${BERTH_IMAGE_TAG:-$version}"

containers=(gateway machine-driver orchestrator-registry storage-ops machine-controller ecs-emulator)

# Waits until every named service's container reports healthy (its image's HEALTHCHECK).
wait_healthy() {
  local deadline=$(( $(date +%s) + 120 )) service id status pending
  while :; do
    pending=()
    for service in "$@"; do
      id=$(compose ps -q "$service" 2>/dev/null || true)
      status=$( [ -n "$id" ] && docker inspect --format '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$id" 2>/dev/null || echo missing)
      [ "$status" = healthy ] || pending+=("$service=$status")
    done
    [ "${#pending[@]}" -eq 0 ] && return 0
    [ "$(date +%s)" -lt "$deadline" ] || fail "not healthy after 120s: ${pending[*]}"
    sleep 1
  done
}

# One service's log so far, in a file: grepping a pipe from `compose logs` would let an early-exiting
# grep -q fail the pipeline (SIGPIPE, under pipefail).
log_of() {
  compose logs --no-color "$1" >"$work/$1.log" 2>&1 || true
  printf '%s' "$work/$1.log"
}

# curl through the gateway with the admin token: prints the status line's code, the body to $work/body
# and the headers to $work/headers.
api() {
  local method=$1 path=$2; shift 2
  curl -sS -o "$work/body" -D "$work/headers" -w '%{http_code}' -X "$method" \
    -H "Authorization: Bearer $BERTH_TOKEN" -H 'content-type: application/json' "$@" "$BERTH_URL$path" \
    || true
}
expect() {
  local want=$1 got=$2 what=$3
  [ "$got" = "$want" ] || fail "$what: HTTP $got, wanted $want: $(head -c 400 "$work/body")"
}

step "up (project $project, gateway on $BERTH_URL)"
compose up -d
wait_healthy "${containers[@]}"
say "every container is healthy"

# The admin token, printed once in the gateway's log on the first start; the emulator's key in its.
BERTH_TOKEN=$(grep -o 'admin token: berth_[0-9a-f]*' "$(log_of gateway)" | cut -d' ' -f3)
[ "$(printf '%s\n' "$BERTH_TOKEN" | grep -c .)" = 1 ] || fail "not one admin token in the gateway's log"
export BERTH_TOKEN
key_id=$(grep -o 'emulator access key id: [A-Za-z0-9]*' "$(log_of ecs-emulator)" | head -1 | cut -d' ' -f5)
key_secret=$(grep -o 'emulator access key secret: [A-Za-z0-9]*' "$work/ecs-emulator.log" | head -1 | cut -d' ' -f5)
[ -n "$key_id" ] && [ -n "$key_secret" ] || fail "no emulator access key in the emulator's log"

# Volumes and the gateway's readiness through the published port only.
code=$(api GET /readyz); expect 200 "$code" "the gateway's readiness"

step "orchestrators: the first start's default is local; register another"
berth orchestrator list
berth orchestrator get local -o json | jq -e '.default == true and .kind == "local" and .storageOps == true' >/dev/null \
  || fail "the default orchestrator is not local"
berth orchestrator register scratch --kind local --config basePath=/data/volumes/scratch >/dev/null
code=$(api GET /v1/orchestrators/scratch); expect 200 "$code" "GetOrchestrator"
jq -e '.kind == "local"' "$work/body" >/dev/null || fail "scratch is not local"

step "volumes: create (CLI and curl), read, list"
berth volume create data --capacity 1Gi -l app=demo --wait >/dev/null
code=$(api POST /v1/volumes -d '{"name":"logs","capacity":"500Mi","labels":{"app":"demo"}}')
expect 201 "$code" "AddStorage logs"
berth volume create other --capacity 10Mi --orchestrator scratch --wait >/dev/null
berth volume get data -o json | jq -e '.status.phase == "Ready"' >/dev/null || fail "data is not Ready"
code=$(api GET /v1/volumes/default/logs); expect 200 "$code" "ReadStorage logs"
berth volume list -o wide
code=$(api GET '/v1/volumes?labelSelector=app%3Ddemo'); expect 200 "$code" "ListStorage"
[ "$(jq '.items | length' "$work/body")" = 2 ] || fail "ListStorage app=demo: $(cat "$work/body")"
volumes_before=$(berth volume list -o json | jq -c '[.items[].metadata.uid] | sort')

step "trace: one AddStorage's trace id in the gateway's, storage-ops' and the registry's logs"
trace_id=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
code=$(api POST /v1/volumes -H "traceparent: 00-$trace_id-$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')-01" \
  -d '{"name":"traced","capacity":"1Mi"}')
expect 201 "$code" "AddStorage traced"
request_id=$(grep -i '^x-request-id:' "$work/headers" | tr -d '\r' | cut -d' ' -f2)
sleep 1
# The gateway continues the caller's trace when it sends one; where it starts its own, the request id
# leads to it.
if ! grep -q "trace_id=$trace_id" "$(log_of gateway)"; then
  trace_id=$(grep -F "$request_id" "$work/gateway.log" | grep -o 'trace_id=[0-9a-f]\{32\}' | head -1 | cut -d= -f2 || true)
fi
[ -n "$trace_id" ] || fail "request $request_id has no trace_id in the gateway's log"
for service in gateway storage-ops orchestrator-registry; do
  grep -q "trace_id=$trace_id" "$(log_of "$service")" || fail "trace $trace_id is not in $service's log"
done
say "trace $trace_id found in all three"
berth volume delete traced >/dev/null

step "machines: create (CLI and curl), status, list on the emulator"
sed -e "s/EMULATOR_ACCESS_KEY_ID/$key_id/" -e "s/EMULATOR_ACCESS_KEY_SECRET/$key_secret/" \
  examples/machine.yaml >"$work/machine.yaml"
sed -e "s/EMULATOR_ACCESS_KEY_ID/$key_id/" -e "s/EMULATOR_ACCESS_KEY_SECRET/$key_secret/" \
  examples/machine-request.json >"$work/machine.json"
berth machine create -f "$work/machine.yaml" --wait --timeout 60s
berth machine status -f "$work/machine.yaml"
provider_id=$(berth machine status -f "$work/machine.yaml" -o json | jq -r .providerID)
[[ "$provider_id" == cn-shanghai.i-* ]] || fail "worker-1's provider id: $provider_id"
curl_machine=$(jq -r .machine.metadata.name examples/machine-request.json)
code=$(api POST /v1/machines:create -d @"$work/machine.json"); expect 200 "$code" "CreateMachine $curl_machine"
# Until the VM runs, status is 409 Uninitialized: retry for a while, as --wait does.
for _ in $(seq 60); do
  code=$(api POST /v1/machines:status -d @"$work/machine.json")
  [ "$code" = 200 ] && break
  sleep 0.5
done
expect 200 "$code" "GetMachineStatus $curl_machine"
berth machine list -f "$work/machine.yaml" -o json \
  | jq -e --arg p "$provider_id" --arg m "$curl_machine" '.machineList[$p] == "worker-1" and ([.machineList[]] | index($m)) != null' >/dev/null \
  || fail "ListMachines does not have both machines"

step "declarative machines: apply a deployment of 2, follow its roll, read a machine by name"
sed -e "s/EMULATOR_ACCESS_KEY_ID/$key_id/" -e "s/EMULATOR_ACCESS_KEY_SECRET/$key_secret/" \
  -e "s/replicas: 3/replicas: 2/" examples/machine-deployment.yaml >"$work/md.yaml"
berth apply -f "$work/md.yaml"
berth rollout status md/workers --timeout 120s
machines_before=$(berth get machines -o json | jq -c '[.items[] | select(.status.phase == "Running") | .metadata.name] | sort')
[ "$(jq length <<<"$machines_before")" = 2 ] || fail "the deployment's machines: $machines_before"
berth machine get "$(jq -r '.[0]' <<<"$machines_before")" -o json | jq -e '.status.providerID | startswith("cn-shanghai.i-")' >/dev/null \
  || fail "a deployment's machine has no VM"
berth get secret demo-cloud -o json | jq -e '(.stringData == null) and (.data == null) and (.keys | length == 2)' >/dev/null \
  || fail "a secret read back shows values"

step "restart storage-ops: every volume is still there"
compose restart storage-ops >/dev/null
wait_healthy storage-ops
[ "$(berth volume list -o json | jq -c '[.items[].metadata.uid] | sort')" = "$volumes_before" ] \
  || fail "the volumes changed across a storage-ops restart"

step "down, then up: registrations, volumes, the machine and the token are all still there"
compose down >/dev/null 2>&1
compose up -d >/dev/null 2>&1
wait_healthy "${containers[@]}"
[ "$(berth volume list -o json | jq -c '[.items[].metadata.uid] | sort')" = "$volumes_before" ] \
  || fail "the volumes changed across down/up"
berth orchestrator get scratch >/dev/null || fail "the scratch registration is gone after down/up"
# The token from the first start still works (the calls above used it), and no new one was made.
! grep -q 'admin token: ' "$(log_of gateway)" || fail "the second start made another admin token"
grep -q "emulator access key id: $key_id" "$(log_of ecs-emulator)" || fail "the emulator's key changed"
[ "$(berth machine status -f "$work/machine.yaml" -o json | jq -r .providerID)" = "$provider_id" ] \
  || fail "worker-1 changed across down/up"
code=$(api POST /v1/machines:status -d @"$work/machine.json"); expect 200 "$code" "GetMachineStatus after down/up"
berth rollout status md/workers --timeout 120s
[ "$(berth get machines -o json | jq -c '[.items[] | select(.status.phase == "Running") | .metadata.name] | sort')" = "$machines_before" ] \
  || fail "the deployment's machines changed across down/up"

step "a second admin token, minted inside the gateway container"
second=$(compose exec -T gateway gateway token create --admin --name second | tr -d '\r')
sleep 1.5   # the gateway re-reads its tokens file once a second
BERTH_TOKEN="$second" berth orchestrator list >/dev/null || fail "the minted token is refused"

step "registry stopped: AddStorage is 503 with Retry-After; started: it succeeds"
compose stop orchestrator-registry >/dev/null 2>&1
code=$(api POST /v1/volumes -d '{"name":"while-down","capacity":"1Mi"}')
expect 503 "$code" "AddStorage with the registry stopped"
grep -qi '^retry-after: [0-9]' "$work/headers" || fail "the 503 has no Retry-After: $(cat "$work/headers")"
jq -e '.code == 14' "$work/body" >/dev/null || fail "the 503 is not code 14: $(cat "$work/body")"
compose start orchestrator-registry >/dev/null 2>&1
wait_healthy orchestrator-registry
code=$(api POST /v1/volumes -d '{"name":"while-down","capacity":"1Mi"}')
expect 201 "$code" "AddStorage once the registry is back"

step "observability: Prometheus (the profile's, built here) scrapes every service"
# The profile's other images (collector, Jaeger) are pulled from Docker Hub; its Prometheus can be
# made here from Debian's binary, so it is the one started.
prometheus_image=$(deploy/build-prometheus-image.sh 2>/dev/null) || fail "deploy/build-prometheus-image.sh failed"
prometheus_port=$(( port + 1 ))
# The gateway's page needs a cluster-wide metrics token; the admin token is one. Readable by the
# image's user (a file of this run's temporary directory, gone at its end).
printf '%s' "$BERTH_TOKEN" >"$work/gateway-metrics-token"
chmod 0644 "$work/gateway-metrics-token"
BERTH_PROMETHEUS_IMAGE="$prometheus_image" BERTH_PROMETHEUS_PUBLISH="127.0.0.1:$prometheus_port" \
  PROMETHEUS_GATEWAY_TOKEN_FILE="$work/gateway-metrics-token" \
  compose --profile observability up -d --no-deps prometheus >/dev/null 2>&1 || fail "prometheus did not start"
prometheus_url="http://127.0.0.1:$prometheus_port"
targets=""
for _ in $(seq 90); do
  targets=$(curl -sf "$prometheus_url/api/v1/targets" 2>/dev/null || true)
  if [ -n "$targets" ] && echo "$targets" | jq -e \
      '[.data.activeTargets[] | select(.health == "up")] | length == 6' >/dev/null; then
    break
  fi
  sleep 1
done
echo "$targets" | jq -e '[.data.activeTargets[] | select(.health == "up")] | length == 6' >/dev/null \
  || fail "not every target is up: $(echo "$targets" | jq -c '[.data.activeTargets[] | {job: .labels.job, instance: .labels.instance, health, lastError}]')"
# What an operator alerts on is there, by name: every service's build, and the series the issue lists.
for query in 'count(berth_build_info)' 'count(process_resident_memory_bytes)' \
             'count(berth_gateway_breaker_state)' 'count(berth_storage_volumes)' \
             'count(berth_controller_machines)'; do
  got=$(curl -sf --get "$prometheus_url/api/v1/query" --data-urlencode "query=$query" \
        | jq -r '.data.result[0].value[1] // "0"')
  [ "${got:-0}" -ge 1 ] || fail "Prometheus has no series for $query"
  say "  $query = $got"
done

step "delete: volumes (CLI and curl) and the machine"
berth volume delete data >/dev/null
code=$(api DELETE /v1/volumes/default/logs); expect 200 "$code" "DeleteStorage logs"
jq -e '.deleted == true' "$work/body" >/dev/null || fail "logs was not deleted"
berth volume delete other >/dev/null
berth volume delete while-down >/dev/null
berth volume list -A -o json | jq -e '.items == []' >/dev/null || fail "volumes are left"
berth machine delete -f "$work/machine.yaml" --wait --timeout 60s
# A VM between states answers 503 with Retry-After: retry then, as the README says.
for _ in $(seq 60); do
  code=$(api POST /v1/machines:delete -d @"$work/machine.json")
  [ "$code" = 503 ] || break
  sleep 0.5
done
expect 200 "$code" "DeleteMachine $curl_machine"
berth machine list -f "$work/machine.yaml" -o json | jq -e '.machineList == {}' >/dev/null \
  || fail "the machine is still listed"
berth delete md workers --wait --timeout 120s
berth get machines -o json | jq -e '.items == []' >/dev/null || fail "the deployment's machines are left"
berth orchestrator delete scratch >/dev/null
say "all steps passed"

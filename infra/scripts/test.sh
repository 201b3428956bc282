#!/usr/bin/env bash
# The whole test suite: prerequisites, format, then every vitest project
# (unit, then integration on a real Temporal dev server and a real
# kube-apiserver started by the global setup) with lint and type-check beside
# them. Ends with the runner's summary line; fails if any of them failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash infra/scripts/check-prereqs.sh
[[ -f node_modules/.package-lock.json ]] || npm ci --no-audit --no-fund

# First run: the temporal CLI (seconds), Debian's squid and redis-server
# (seconds), Chromium's headless shell for the dashboard's browser test (seconds), libvirt, QEMU, dnsmasq and sshd for the kvm tests (apt-get install, about 15 s),
# the kvm end-to-end test's Debian guest image (mmdebstrap, 1.5-2 minutes) and
# kube-apiserver/etcd/kubectl (5-15 minutes on 2 cores), Jaeger for the
# tracing test (Go, about 5 minutes on a quiet 2-core machine), promtool
# for the alert rules' test (Go, minutes) and helm for the chart's test (Go,
# about 3 minutes), moto's EC2 server for the aws
# provider's tests (pip, about 40 s), and for the kubernetes provider's
# real node: containerd, runc and the CNI plugins (apt-get), kubelet and
# kube-scheduler (Go, a minute or two after the apiserver's build) and the
# Squid and pause images (mmdebstrap, 1-2 minutes) into the cache; later
# runs reuse them.
start=$(date +%s)
bash infra/scripts/install-temporal.sh >/dev/null
bash infra/scripts/install-moto.sh >/dev/null
bash infra/scripts/install-squid.sh >/dev/null
bash infra/scripts/install-libvirt.sh >/dev/null
bash infra/scripts/build-kvm-guest.sh >/dev/null
bash infra/scripts/install-redis.sh >/dev/null
bash infra/scripts/install-chromium.sh >/dev/null
bash infra/scripts/build-kube.sh node >/dev/null
bash infra/scripts/install-node.sh >/dev/null
bash infra/scripts/build-node-images.sh >/dev/null
bash infra/scripts/build-jaeger.sh >/dev/null
bash infra/scripts/build-promtool.sh >/dev/null
bash infra/scripts/build-helm.sh >/dev/null
echo "test.sh: servers' binaries ready in $(( $(date +%s) - start )) s"

mkdir -p .tmp
echo "test.sh: format" && npx prettier --check . --log-level warn
# Lint and type-check (about 90 s of CPU) run beside the tests at low
# priority: the integration tests leave the cores idle a sixth of the time
# (waiting on timers, boots and servers), and at nice 10 these two take
# mostly that idle time instead of slowing the tests. Their output is shown,
# and their status counted, after the tests.
echo "test.sh: lint and typecheck (beside the tests, nice 10)"
nice -n 10 npm run -s typecheck >.tmp/typecheck.log 2>&1 &
typecheck=$!
nice -n 10 npx eslint . --max-warnings 0 >.tmp/lint.log 2>&1 &
lint=$!
set +e
npx vitest run --reporter=default --reporter=json --outputFile.json=.tmp/vitest-results.json "$@"
status=$?
wait "$typecheck"
typecheck_status=$?
wait "$lint"
lint_status=$?
set -e
cat .tmp/typecheck.log .tmp/lint.log
echo "test.sh: lint exited $lint_status, typecheck exited $typecheck_status; done $(( $(date +%s) - start )) s after the start"
node infra/scripts/summarize-tests.mjs .tmp/vitest-results.json || true
if [[ $status -eq 0 && ($lint_status -ne 0 || $typecheck_status -ne 0) ]]; then
  status=1
fi
exit $status

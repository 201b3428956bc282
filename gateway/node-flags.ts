/**
 * The Node flags the gateway's Deployment starts it with (infra/k8s and the
 * Helm chart: `command: [node, ...GATEWAY_NODE_FLAGS, /app/bin/egress-proxies.js]`).
 *
 * `--single-threaded-gc`: the relay's heap is small (about 15 MB) and
 * churns fast (socket buffers, one set of stream objects per tunnel), so
 * V8's helper threads start a concurrent marking every few hundred
 * milliseconds. On a pod of one or two CPUs those threads compete with
 * the event loop: `npm run bench:gateway` measured about twice the CPU per
 * GiB for 1 MiB bodies and some 15 ms more time to first byte at p99 with
 * them (docs/architecture.md, Decisions: the gateway's garbage collector).
 * V8 cannot change this once running (setting it later aborts the
 * process), hence a start flag rather than a setting.
 */
export const GATEWAY_NODE_FLAGS: readonly string[] = ['--single-threaded-gc'];

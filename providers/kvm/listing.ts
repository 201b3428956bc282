/**
 * listByTag for the kvm provider: one round trip per host (a fixed script
 * that prints every domain of ours with its state, XML and agent answer,
 * the marks volumes without a domain, the DHCP leases and the ARP table),
 * every host at once. A host that cannot be listed does not hold up or
 * fail the others: its instances are left out and the host is named in
 * `unlisted` (so GC and the drift sweep leave them alone). Only when no
 * host answers is the listing an error.
 */
import type { Operations } from '../shared/operation.js';
import type { Instance, Listing, UnlistedScope } from '../types.js';
import { listedAddress } from './addresses.js';
import { classify } from './classify.js';
import { parseMarks } from './domain-xml.js';
import { isUp, mapState, toInstance } from './domains.js';
import { DOMAIN_NAME, domainOfVolume, formatProviderId } from './ids.js';
import type { HostHandle, Hosts } from './hosts.js';
import { parseMarksJson } from './volumes.js';

const LIST_SCRIPT = `uri=$1; pool=$2; leases=$3
names=$(virsh -q -c "$uri" list --all --name) || exit 1
printf '%s\\n' "$names" | while IFS= read -r d; do
  [ -n "$d" ] || continue
  s=$(virsh -q -c "$uri" domstate "$d" 2>/dev/null) || { echo "@@SKIP $d"; continue; }
  x=$(virsh -q -c "$uri" dumpxml "$d" 2>/dev/null) || { echo "@@SKIP $d"; continue; }
  case "$x" in *crawl.example.com/egress-proxies/kvm*) ;; *) continue ;; esac
  a=""
  case "$s" in running|idle|blocked) a=$(virsh -q -c "$uri" domifaddr "$d" --source agent 2>/dev/null) ;; esac
  printf '@@DOMAIN %s\\n@@STATE %s\\n%s\\n@@ADDR\\n%s\\n@@END\\n' "$d" "$s" "$x" "$a"
done
vols=$(virsh -q -c "$uri" vol-list --pool "$pool" 2>/dev/null | awk '{print $1}')
for v in $vols; do
  printf '@@VOL %s\\n' "$v"
  case "$v" in
    proxy-*.marks) virsh -q -c "$uri" domstate "\${v%.marks}" >/dev/null 2>&1 || { printf '@@MARKS %s\\n' "$v"; virsh -q -c "$uri" vol-download --pool "$pool" "$v" /dev/stdout 2>/dev/null; echo; } ;;
  esac
done
echo "@@LEASES"
[ -z "$leases" ] || cat "$leases" 2>/dev/null
echo "@@ARP"
cat /proc/net/arp
`;

/**
 * The script's output → the host's instances, and the domains it could not
 * read. Volumes of ours with no domain (a create that crashed before
 * define) are reported, Terminated, so GC collects them.
 */
export function parseHostListing(out: string, host: string): { instances: Instance[]; skipped: string[] } {
  const instances: Instance[] = [];
  const domains = new Set<string>();
  const arpAt = out.lastIndexOf('\n@@ARP\n');
  const arp = arpAt < 0 ? '' : out.slice(arpAt + 7);
  const leasesAt = out.lastIndexOf('\n@@LEASES\n');
  const leases = leasesAt < 0 || arpAt < leasesAt ? '' : out.slice(leasesAt + 10, arpAt);
  for (const block of out.split('@@DOMAIN ').slice(1)) {
    const name = block.slice(0, block.indexOf('\n'));
    domains.add(name);
    const state = /@@STATE (.*)\n/.exec(block)?.[1] ?? '';
    const end = block.indexOf('\n@@END');
    const addrAt = block.indexOf('\n@@ADDR\n');
    const xml = block.slice(block.indexOf('\n', block.indexOf('@@STATE')) + 1, addrAt);
    const marks = parseMarks(xml);
    if (marks === undefined || !marks.managed || !DOMAIN_NAME.test(name)) continue;
    const ip = isUp(state) ? listedAddress(xml, arp, block.slice(addrAt, end), leases) : undefined;
    instances.push(toInstance(formatProviderId(host, name), mapState(state, ip), ip, marks));
  }
  const skipped: string[] = [];
  for (const m of out.matchAll(/^@@SKIP (.*)$/gm)) {
    domains.add(m[1]!);
    skipped.push(m[1]!);
  }
  for (const block of out.split('@@MARKS ').slice(1)) {
    const vol = block.slice(0, block.indexOf('\n'));
    const domain = domainOfVolume(vol);
    if (domain === undefined || domains.has(domain)) continue;
    const marks = parseMarksJson(
      block.slice(block.indexOf('\n') + 1, block.indexOf('@@', 1) > 0 ? block.indexOf('@@', 1) : undefined),
    );
    if (marks === undefined || !marks.managed) continue;
    instances.push(toInstance(formatProviderId(host, domain), 'Terminated', undefined, marks));
  }
  return { instances, skipped };
}

export class HostListings {
  constructor(
    private readonly hosts: Hosts,
    private readonly ops: Operations,
  ) {}

  /** Every host's instances; run inside the operation frame (it throws when no host answers). */
  async list(signal: AbortSignal): Promise<Listing> {
    const hosts = this.hosts.all();
    const settled = await Promise.allSettled(hosts.map((h) => this.listHost(h, signal)));
    const listing: Listing = [];
    const unlisted: UnlistedScope[] = [];
    let firstError: unknown;
    settled.forEach((r, i) => {
      const h = hosts[i]!;
      if (r.status === 'fulfilled') {
        listing.push(...r.value);
        return;
      }
      firstError ??= r.reason;
      const summary = signal.aborted ? 'aborted by the caller' : classify(r.reason, 'list').summary;
      unlisted.push({
        target: h.config.name,
        idPrefix: formatProviderId(h.config.name, ''),
        message: summary.slice(0, 512),
      });
      this.ops.log.warn({ host: h.config.name, error: summary }, 'list: host could not be listed; left out');
    });
    if (unlisted.length === hosts.length) throw firstError;
    if (unlisted.length > 0) listing.unlisted = unlisted;
    return listing;
  }

  private async listHost(h: HostHandle, signal: AbortSignal): Promise<Instance[]> {
    const out = await h.virsh.script(LIST_SCRIPT, [h.config.pool, h.config.dhcpLeasesFile ?? ''], {
      signal,
      timeoutMs: this.hosts.callMs * 4,
    });
    const { instances, skipped } = parseHostListing(out, h.config.name);
    for (const name of skipped)
      this.ops.log.warn(
        { host: h.config.name, name: name.slice(0, 64) },
        'list: domain could not be read; skipped',
      );
    return instances;
  }
}

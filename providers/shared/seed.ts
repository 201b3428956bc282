/**
 * The NoCloud seed: an ISO labelled `cidata` with `meta-data`, the Proxy's
 * `user-data` byte for byte (never parsed or re-rendered; with credentials,
 * inside a multipart beside the htpasswd part: cloud-init-credentials.ts)
 * and, when configured, `vendor-data`. Built in memory; its bytes are only ever
 * streamed to the host, never logged.
 */
import type { ProxyCredentials } from '../../credentials/proxy-credentials.js';
import { userDataWithCredentials } from './cloud-init-credentials.js';
import { buildIso9660 } from './iso9660.js';

/**
 * Installs and starts qemu-guest-agent with whichever package manager the
 * image has. A vendor-data *script* (not a cloud-config) because cloud-init
 * drops vendor cloud-config keys the user-data also defines (the seed's
 * finding: a Proxy with its own `packages:` lost the agent).
 */
export const GUEST_AGENT_SCRIPT = `#!/bin/sh
# egress-proxies: install qemu-guest-agent so the host can learn this VM's address.
set -u
if ! command -v qemu-ga >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-guest-agent
  elif command -v dnf >/dev/null 2>&1; then dnf install -y -q qemu-guest-agent
  elif command -v yum >/dev/null 2>&1; then yum install -y -q qemu-guest-agent
  elif command -v zypper >/dev/null 2>&1; then zypper -n install qemu-guest-agent
  elif command -v apk >/dev/null 2>&1; then apk add qemu-guest-agent
  fi
fi
systemctl enable --now qemu-guest-agent 2>/dev/null || rc-service qemu-guest-agent start 2>/dev/null || true
`;

const BOUNDARY = '==egress-proxies-vendor-data==';

/** The vendor-data document, or undefined when there is none. */
export function buildVendorData(
  installGuestAgent: boolean,
  vendorData: string | undefined,
): string | undefined {
  if (!installGuestAgent) return vendorData;
  if (vendorData === undefined) return GUEST_AGENT_SCRIPT;
  const part = (type: string, body: string) =>
    `--${BOUNDARY}\nContent-Type: ${type}; charset="utf-8"\nMIME-Version: 1.0\n\n${body}${body.endsWith('\n') ? '' : '\n'}`;
  const userType = vendorData.startsWith('#!') ? 'text/x-shellscript' : 'text/cloud-config';
  return (
    `Content-Type: multipart/mixed; boundary="${BOUNDARY}"\nMIME-Version: 1.0\n\n` +
    part('text/x-shellscript', GUEST_AGENT_SCRIPT) +
    part(userType, vendorData) +
    `--${BOUNDARY}--\n`
  );
}

export interface SeedInput {
  instanceName: string;
  cloudInit: string | undefined;
  /** The credentials the proxy must require: their htpasswd goes into user-data. */
  credentials?: ProxyCredentials;
  installGuestAgent: boolean;
  vendorData: string | undefined;
}

export function buildSeedIso(input: SeedInput): Buffer {
  const files = [
    {
      name: 'meta-data',
      data: Buffer.from(
        `instance-id: ${input.instanceName}\nlocal-hostname: ${input.instanceName}\n`,
        'utf8',
      ),
    },
    // No cloud-init given: an empty cloud-config, so NoCloud still finds a complete seed.
    {
      name: 'user-data',
      data: Buffer.from(
        userDataWithCredentials(input.cloudInit, input.credentials) ?? '#cloud-config\n{}\n',
        'utf8',
      ),
    },
  ];
  const vendor = buildVendorData(input.installGuestAgent, input.vendorData);
  if (vendor !== undefined) files.push({ name: 'vendor-data', data: Buffer.from(vendor, 'utf8') });
  return buildIso9660('cidata', files);
}

/**
 * A network of the test's own for real kvm guests. libvirtd runs in the root
 * network namespace and attaches a domain's tap to a bridge there, so the
 * bridge is in the root namespace, but it has no address: its only other
 * port is a veth into a namespace this helper creates, which holds the
 * guests' gateway address, dnsmasq (DHCP, its lease file in the test's
 * directory) and an HTTPS probe target. The test process reaches the guests
 * through a second veth pair into that namespace and a route for the guests'
 * /24 only. Addresses come from 198.18.0.0/15 (RFC 2544, never routed) and
 * are checked unused on this machine first: nothing the test sends leaves
 * the links and the namespace it created.
 *
 *   root ns:  [vnetN (guest)]──bridge (no address)──veth──┐
 *             route 198.18.K.0/24 via 198.19.K.2 ─ veth ──┤
 *   test ns:  198.18.K.1 (gateway, dnsmasq, probe target) │ 198.19.K.2, forwarding
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { generate } from 'selfsigned';

const run = promisify(execFile);

export interface GuestNetwork {
  namespace: string;
  bridge: string;
  /** The guests' gateway and the probe target's address, inside the namespace. */
  gateway: string;
  /** The guests' subnet, e.g. 198.18.7.0/24. */
  subnet: string;
  /** dnsmasq's lease file (a kvm host's `dhcpLeasesFile`). */
  leasesFile: string;
  /** An HTTPS server in the namespace answering 204 to everything. */
  targetUrl: string;
  /** The target's self-signed certificate (its own CA), PEM, and a file holding it. */
  ca: string;
  caFile: string;
  /** The address dnsmasq leased to `mac`, if any. */
  leaseOf(mac: string): Promise<string | undefined>;
  destroy(): Promise<void>;
}

async function ip(...args: string[]): Promise<string> {
  return (await run('ip', args, { timeout: 20_000 })).stdout;
}

/** A K with 198.18.K.0/24 and 198.19.K.0/30 nowhere in this machine's addresses or routes. */
async function freeOctet(): Promise<number> {
  const seen =
    (await ip('-o', 'addr')) + (await ip('-o', 'route')) + (await ip('-o', 'route', 'show', 'table', 'all'));
  for (let i = 0; i < 50; i++) {
    const k = randomInt(1, 255);
    if (!seen.includes(`198.18.${k}.`) && !seen.includes(`198.19.${k}.`)) return k;
  }
  throw new Error('no free 198.18.K.0/24 on this machine');
}

function waitForLine(child: ChildProcess, re: RegExp, what: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(
      () => reject(new Error(`${what} did not start within ${timeoutMs} ms: ${out}`)),
      timeoutMs,
    );
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = re.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        resolve(m[1] ?? m[0]);
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${code}): ${out}`));
    });
  });
}

// The probe target, run by `node -e` inside the namespace (no file of its own to keep).
const TARGET = `
const https = require('node:https');
const s = https.createServer({ key: process.env.KEY, cert: process.env.CERT }, (req, res) => res.writeHead(204).end());
s.listen(0, process.env.HOST, () => console.log('listening ' + s.address().port));
`;

export async function createGuestNetwork(root: string): Promise<GuestNetwork> {
  const id = randomBytes(3).toString('hex');
  const k = await freeOctet();
  const namespace = `ep-kvm-${id}`;
  const bridge = `epbr${id}`;
  const lanVeth = `epv${id}`;
  const linkVeth = `epl${id}`;
  const gateway = `198.18.${k}.1`;
  const subnet = `198.18.${k}.0/24`;
  const leasesFile = join(root, 'dnsmasq.leases');
  const children: ChildProcess[] = [];
  const undo: Array<() => Promise<unknown>> = [];
  const destroy = async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
    for (const u of undo.reverse()) await u().catch(() => undefined);
  };
  try {
    await ip('netns', 'add', namespace);
    undo.push(() => ip('netns', 'del', namespace));
    await ip('link', 'add', bridge, 'type', 'bridge');
    undo.push(() => ip('link', 'del', bridge));
    // No IPv6 on the bridge: it must never take part in any network but this one.
    await run('sysctl', ['-qw', `net.ipv6.conf.${bridge}.disable_ipv6=1`]).catch(() => undefined);
    await ip('link', 'set', bridge, 'up');
    await ip('link', 'add', lanVeth, 'type', 'veth', 'peer', 'name', 'lan', 'netns', namespace);
    undo.push(() => ip('link', 'del', lanVeth));
    await ip('link', 'set', lanVeth, 'master', bridge, 'up');
    await ip('-n', namespace, 'link', 'set', 'lo', 'up');
    await ip('-n', namespace, 'addr', 'add', `${gateway}/24`, 'dev', 'lan');
    await ip('-n', namespace, 'link', 'set', 'lan', 'up');
    await ip('link', 'add', linkVeth, 'type', 'veth', 'peer', 'name', 'wan', 'netns', namespace);
    undo.push(() => ip('link', 'del', linkVeth));
    await ip('addr', 'add', `198.19.${k}.1/30`, 'dev', linkVeth);
    await ip('link', 'set', linkVeth, 'up');
    await ip('-n', namespace, 'addr', 'add', `198.19.${k}.2/30`, 'dev', 'wan');
    await ip('-n', namespace, 'link', 'set', 'dev', 'wan', 'up');
    await run('ip', ['netns', 'exec', namespace, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
    await ip('route', 'add', subnet, 'via', `198.19.${k}.2`, 'dev', linkVeth);
    undo.push(() => ip('route', 'del', subnet));

    const dnsmasq = spawn(
      'ip',
      [
        'netns',
        'exec',
        namespace,
        'dnsmasq',
        '--keep-in-foreground',
        '--log-facility=-',
        '--conf-file=/dev/null',
        '--port=0',
        '--interface=lan',
        '--bind-interfaces',
        '--user=root',
        '--dhcp-authoritative',
        `--dhcp-range=198.18.${k}.10,198.18.${k}.250,255.255.255.0,1h`,
        `--dhcp-option=option:router,${gateway}`,
        `--dhcp-leasefile=${leasesFile}`,
        `--pid-file=${join(root, 'dnsmasq.pid')}`,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(dnsmasq);
    await waitForLine(dnsmasq, /DHCP, IP range/, 'dnsmasq', 15_000);

    const pems = await generate([{ name: 'commonName', value: gateway }], {
      keyType: 'ec',
      curve: 'P-256',
      algorithm: 'sha256',
      extensions: [
        { name: 'basicConstraints', cA: true },
        { name: 'keyUsage', digitalSignature: true, keyCertSign: true },
        { name: 'extKeyUsage', serverAuth: true },
        { name: 'subjectAltName', altNames: [{ type: 7, ip: gateway }] },
      ],
    });
    const caFile = join(root, 'probe-target-ca.pem');
    await (await import('node:fs/promises')).writeFile(caFile, pems.cert);
    const target = spawn('ip', ['netns', 'exec', namespace, process.execPath, '-e', TARGET], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, KEY: pems.private, CERT: pems.cert, HOST: gateway },
    });
    children.push(target);
    const port = await waitForLine(target, /listening (\d+)/, 'the probe target', 15_000);
    return {
      namespace,
      bridge,
      gateway,
      subnet,
      leasesFile,
      targetUrl: `https://${gateway}:${port}/`,
      ca: pems.cert,
      caFile,
      async leaseOf(mac) {
        const text = await readFile(leasesFile, 'utf8').catch(() => '');
        const line = text.split('\n').find((l) => l.split(' ')[1]?.toLowerCase() === mac.toLowerCase());
        return line?.split(' ')[2];
      },
      destroy,
    };
  } catch (err) {
    await destroy();
    throw err;
  }
}

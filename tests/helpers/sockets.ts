/**
 * What a process has bound, read from /proc: the assertion that a server
 * (Squid, in the kubernetes provider's tests) listens where its config says
 * and nowhere else.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/**
 * Every socket a process has bound, as `proto address:port` (TCP: listening
 * sockets only; UDP: all), from /proc/<pid>/fd and /proc/net/{tcp,udp}{,6}.
 */
export function boundSockets(pid: number): string[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let target = '';
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue; // closed meanwhile
    }
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m?.[1]) inodes.add(m[1]);
  }
  const found: string[] = [];
  for (const proto of ['tcp', 'tcp6', 'udp', 'udp6']) {
    const lines = readFileSync(`/proc/${pid}/net/${proto}`, 'utf8').trim().split('\n').slice(1);
    for (const line of lines) {
      const f = line.trim().split(/\s+/);
      const [local, state, inode] = [f[1] ?? '', f[3] ?? '', f[9] ?? ''];
      if (!inodes.has(inode)) continue;
      if (proto.startsWith('tcp') && state !== '0A') continue; // 0A: LISTEN
      found.push(`${proto} ${decodeProcAddress(local)}`);
    }
  }
  return found;
}

/** /proc/net's hex `address:port` (IPv4 or IPv6, in host byte order words) to text. */
function decodeProcAddress(hex: string): string {
  const [addr = '', port = ''] = hex.split(':');
  const portNumber = parseInt(port, 16);
  const words = addr.match(/.{8}/g) ?? [];
  const bytes = words.flatMap((w) => (w.match(/../g) ?? []).reverse().map((b) => parseInt(b, 16)));
  if (bytes.length === 4) return `${bytes.join('.')}:${portNumber}`;
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((((bytes[i] ?? 0) << 8) | (bytes[i + 1] ?? 0)).toString(16));
  return `[${groups.join(':')}]:${portNumber}`;
}

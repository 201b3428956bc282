import { connect, createServer } from 'node:net';
import { freePort } from '../cli/ports.js';

// The worker uses it too (its SDK metrics port), so it lives with the production code.
export { freePort };

/** True when something accepts TCP on host:port. */
export async function portInUse(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(true));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(false)));
  });
}

/** `preferred` if it is free, otherwise any free port. */
export async function preferredOrFreePort(
  preferred: number | undefined,
  host = '127.0.0.1',
): Promise<number> {
  if (preferred !== undefined && preferred > 0 && !(await portInUse(preferred, host))) return preferred;
  return freePort(host);
}

/** True when a TCP connection to host:port is accepted (a server is up there). */
export function acceptsTcp(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * One CONNECT attempt: dial the upstream proxy, ask it to CONNECT to the
 * crawler's authority and read its answer's head.
 */
import { connect, type Socket } from 'node:net';
import type { ProxyView } from '../api/proxy-catalog.js';
import { dialFailure, UpstreamAttemptError } from './upstream-policy.js';

/** Longest upstream answer to CONNECT we read before giving up on it. */
const MAX_UPSTREAM_HEAD = 16 * 1024;

/**
 * Resolves with the socket and any bytes after the answer's head; rejects
 * with UpstreamAttemptError (refused, timeout, rejected with the proxy's
 * status, reset). `onSocket` gets the socket the moment it exists, so a
 * crawler that leaves mid-setup can end the attempt at once.
 */
export function openTunnel(
  proxy: ProxyView,
  authority: string,
  timeoutMs: number,
  onSocket: (socket: Socket) => void,
  /** The upstream proxy's own credentials (`Basic ...`), never the crawler's. */
  authorization?: string,
): Promise<{ socket: Socket; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: proxy.host, port: proxy.port });
    socket.setNoDelay(true);
    onSocket(socket);
    let buffered: Buffer = Buffer.alloc(0);
    const fail = (error: UpstreamAttemptError) => {
      clearTimeout(timer);
      socket.destroy();
      reject(error);
    };
    let connected = false;
    const timer = setTimeout(
      () =>
        fail(
          connected
            ? // The proxy may be waiting on the target: not the proxy's fault for sure.
              new UpstreamAttemptError('timeout', `no answer to CONNECT within ${timeoutMs} ms`)
            : new UpstreamAttemptError(
                'timeout',
                `no TCP connection within ${timeoutMs} ms`,
                'ConnectTimeout',
              ),
        ),
      timeoutMs,
    );
    socket.once('connect', () => {
      connected = true;
      const credentials = authorization ? `Proxy-Authorization: ${authorization}\r\n` : '';
      socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n${credentials}\r\n`);
    });
    socket.on('error', (error: NodeJS.ErrnoException) => fail(dialFailure(error)));
    socket.once('close', () =>
      fail(new UpstreamAttemptError('reset', 'closed before answering CONNECT', 'ProtocolError')),
    );
    const onData = (chunk: Buffer) => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      const end = buffered.indexOf('\r\n\r\n');
      if (end < 0) {
        if (buffered.length > MAX_UPSTREAM_HEAD)
          fail(new UpstreamAttemptError('rejected', 'answer to CONNECT too long'));
        return;
      }
      socket.off('data', onData);
      socket.pause();
      clearTimeout(timer);
      const status = connectAnswerStatus(buffered);
      if (status !== '200') {
        return fail(
          new UpstreamAttemptError(
            'rejected',
            `answered CONNECT with ${status ?? 'no status line'}`,
            status === '407' ? 'AuthFailed' : status === undefined ? 'ProtocolError' : undefined,
          ),
        );
      }
      socket.removeAllListeners('close');
      socket.removeAllListeners('error');
      resolve({ socket, rest: buffered.subarray(end + 4) });
    };
    socket.on('data', onData);
  });
}

/** The status code of an answer's status line, if it has one. */
function connectAnswerStatus(head: Buffer): string | undefined {
  const statusLine = head.subarray(0, head.indexOf('\r\n')).toString('latin1');
  return /^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1];
}

/**
 * What Node's HTTP parser could not take from a crawler: malformed request
 * lines (400), oversized heads (431), heads too slow (408), resets. Answered
 * if the socket still can be; never thrown.
 */
import type { Socket } from 'node:net';
import type { Logger } from 'pino';

export function answerClientError(log: Logger, err: NodeJS.ErrnoException, socket: Socket): void {
  const status =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? 431
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' || err.code === 'ERR_HTTP_HEADERS_TIMEOUT'
        ? 408
        : 400;
  if (err.code !== 'ECONNRESET' && socket.writable && !socket.writableEnded) {
    const text =
      status === 431 ? 'request head too large' : status === 408 ? 'request timeout' : 'bad request';
    socket.end(
      `HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(text) + 1}\r\n\r\n${text}\n`,
    );
    // Read and drop what the client still sends, so closing sends FIN after the answer rather than
    // a reset that can overtake it; a client that keeps sending is cut off after a second.
    socket.on('error', () => undefined);
    socket.resume();
    const cutOff = setTimeout(() => socket.destroy(), 1_000);
    cutOff.unref();
    socket.once('close', () => clearTimeout(cutOff));
  } else {
    socket.destroy();
  }
  log.debug({ code: err.code, status }, 'gateway: malformed or abandoned request');
}

/**
 * How the gateway says no: a Refusal ends a connection with an answer to the
 * crawler (its status and a message, never a credential), written on the raw
 * socket for CONNECT or as the response of a plain-HTTP request.
 */
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { GatewayOutcome } from './metrics.js';

export class Refusal extends Error {
  override name = 'Refusal';
  constructor(
    readonly status: number,
    message: string,
    readonly outcome: GatewayOutcome,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** Answers a CONNECT on its socket and closes it. */
export function refuseTunnel(socket: Socket, refusal: Refusal): void {
  const body = `${refusal.message}\n`;
  const headers = Object.entries(refusal.headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  if (socket.writable)
    socket.end(
      `HTTP/1.1 ${refusal.status} ${statusText(refusal.status)}\r\n${headers}Content-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
}

/** Answers a plain-HTTP request; one whose answer already started is cut off instead. */
export function refuseRequest(res: ServerResponse, refusal: Refusal): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = `${refusal.message}\n`;
  res.writeHead(refusal.status, {
    ...refusal.headers,
    'Content-Type': 'text/plain; charset=utf-8',
    'Content-Length': Buffer.byteLength(body),
    // A wrong password (or a throttled address) ends the connection: the next guess costs a new one.
    ...(refusal.status === 407 || refusal.outcome === 'throttled' ? { Connection: 'close' } : {}),
  });
  res.end(body);
}

function statusText(status: number): string {
  return (
    {
      400: 'Bad Request',
      403: 'Forbidden',
      407: 'Proxy Authentication Required',
      429: 'Too Many Requests',
      502: 'Bad Gateway',
      503: 'Service Unavailable',
    }[status] ?? 'Error'
  );
}

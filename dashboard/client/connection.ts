/**
 * The page's link to the api: the token (kept in this tab's sessionStorage,
 * sent as a bearer header), the session, the event stream (server-sent
 * events read through fetch, which can send the header EventSource
 * cannot) and the two write actions.
 */
import type { DashboardEvents, SessionInfo } from '../protocol.js';

const TOKEN_KEY = 'egress-proxies-token';

export class Unauthorized extends Error {}

export function savedToken(): string {
  return sessionStorage.getItem(TOKEN_KEY) ?? '';
}

export function saveToken(token: string): void {
  if (token === '') sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, token);
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const token = savedToken();
  return token === '' ? extra : { ...extra, Authorization: `Bearer ${token}` };
}

export async function fetchSession(): Promise<SessionInfo> {
  const res = await fetch('/ui/api/session', { headers: headers(), cache: 'no-store' });
  if (res.status === 401) throw new Unauthorized('the token was refused');
  if (!res.ok) throw new Error(`the api answered ${res.status}`);
  return (await res.json()) as SessionInfo;
}

export type EventHandler = <K extends keyof DashboardEvents>(event: K, data: DashboardEvents[K]) => void;

/** Reads the event stream until it ends or `signal` aborts; throws Unauthorized on a 401. */
export async function readEvents(onEvent: EventHandler, signal: AbortSignal): Promise<void> {
  const res = await fetch('/ui/api/events', {
    headers: headers({ Accept: 'text/event-stream' }),
    cache: 'no-store',
    signal,
  });
  if (res.status === 401) throw new Unauthorized('the token was refused');
  if (!res.ok || !res.body) throw new Error(`the event stream answered ${res.status}`);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = 'message';
      const data: string[] = [];
      for (const line of frame.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length > 0) onEvent(event as keyof DashboardEvents, JSON.parse(data.join('\n')) as never);
    }
  }
}

async function post(path: string, body: unknown): Promise<void> {
  const res = await fetch(path, {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json' }),
    body: JSON.stringify(body),
  });
  if (!res.ok) {
    const answer = (await res.json().catch(() => ({}))) as { message?: string };
    throw new Error(answer.message ?? `the api answered ${res.status}`);
  }
}

export function scalePool(id: string, replicas: number): Promise<void> {
  const [namespace, name] = id.split('/') as [string, string];
  return post(`/ui/api/pools/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/scale`, {
    replicas,
  });
}

export function cordonProxy(id: string, cordoned: boolean): Promise<void> {
  const [namespace, name] = id.split('/') as [string, string];
  return post(`/ui/api/proxies/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/cordon`, {
    cordoned,
  });
}

/**
 * The dashboard page: asks for a token when the api wants one, then follows
 * the api's event stream and shows the page the address names.
 */
import 'uplot/dist/uPlot.min.css';
import './styles.css';
import { fetchSession, readEvents, saveToken, savedToken, Unauthorized } from './connection.js';
import { clear, h, setText } from './dom.js';
import { FleetPage, GatewayPage, PoolsPage, ProvidersPage, ProxiesPage, type Page } from './pages.js';
import { Store } from './store.js';

const ROUTES = [
  ['fleet', 'Fleet'],
  ['proxies', 'Proxies'],
  ['pools', 'Pools'],
  ['providers', 'Providers'],
  ['gateway', 'Gateway'],
] as const;
type RouteName = (typeof ROUTES)[number][0];

const store = new Store();
const status = h('p', { className: 'status', role: 'status', 'aria-live': 'polite' });
const who = h('span', { className: 'who' });
const main = h('main', { id: 'main' });
const nav = h(
  'nav',
  { 'aria-label': 'Pages' },
  ...ROUTES.map(([route, label]) => h('a', { href: `#/${route}`, 'data-route': route }, label)),
);
document.body.append(
  h('header', {}, h('span', { className: 'brand' }, 'egress-proxies'), nav, who),
  status,
  main,
);

const pages = new Map<RouteName, Page>();
function page(route: RouteName): Page {
  let p = pages.get(route);
  if (!p) {
    p =
      route === 'proxies'
        ? new ProxiesPage()
        : route === 'pools'
          ? new PoolsPage()
          : route === 'providers'
            ? new ProvidersPage()
            : route === 'gateway'
              ? new GatewayPage()
              : new FleetPage();
    pages.set(route, p);
  }
  return p;
}

let current: Page | undefined;
let drawn = -1;
function showRoute(): void {
  const [path = '', query = ''] = location.hash.replace(/^#\/?/, '').split('?');
  const route: RouteName = ROUTES.find(([r]) => r === path)?.[0] ?? 'fleet';
  const next = page(route);
  next.route?.(new URLSearchParams(query));
  for (const a of nav.querySelectorAll('a')) {
    if (a.dataset.route === route) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (current !== next) {
    clear(main);
    main.appendChild(next.el);
    current = next;
  }
  document.title = `${ROUTES.find(([r]) => r === route)![1]} · egress-proxies`;
  drawn = -1;
  draw();
}

let frame = 0;
function draw(): void {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    if (!current || drawn === store.version) return;
    drawn = store.version;
    current.update(store);
  });
}
window.addEventListener('hashchange', showRoute);

function askForToken(refused: boolean): Promise<void> {
  return new Promise((resolve) => {
    const input = h('input', {
      type: 'password',
      id: 'token',
      autocomplete: 'current-password',
      required: true,
    });
    const form = h(
      'form',
      { className: 'login' },
      h('h1', {}, 'Sign in'),
      h('p', {}, 'The api wants a token: the lease API’s bearer token, or a tenant’s from the tenants file.'),
      refused ? h('p', { className: 'bad', role: 'alert' }, 'That token was refused.') : null,
      h('label', { for: 'token' }, 'Token'),
      input,
      h('button', { type: 'submit' }, 'Sign in'),
    );
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      saveToken(input.value.trim());
      resolve();
    });
    clear(main);
    current = undefined;
    main.appendChild(form);
    input.focus();
  });
}

async function signIn(): Promise<void> {
  let refused = false;
  for (;;) {
    try {
      const session = await fetchSession();
      setText(who, `${session.tenant} (${session.canWrite ? 'operator' : 'read-only'})`);
      const signOut = h('button', { type: 'button', className: 'link' }, 'Sign out');
      signOut.addEventListener('click', () => {
        saveToken('');
        location.reload();
      });
      if (savedToken() !== '') who.append(' ', signOut);
      return;
    } catch (error) {
      if (!(error instanceof Unauthorized)) throw error;
      await askForToken(refused || savedToken() !== '');
      refused = true;
    }
  }
}

async function follow(): Promise<void> {
  let delay = 500;
  for (;;) {
    const abort = new AbortController();
    try {
      setText(status, 'Connecting…');
      let live = false;
      await readEvents((event, data) => {
        if (!live) {
          live = true;
          delay = 500;
          setText(status, '');
        }
        store.apply(event, data);
        draw();
      }, abort.signal);
      setText(status, 'The api closed the stream; reconnecting…');
    } catch (error) {
      if (error instanceof Unauthorized) {
        await signIn();
        continue;
      }
      setText(status, `Lost the api (${(error as Error).message}); reconnecting…`);
    }
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10_000);
  }
}

async function start(): Promise<void> {
  try {
    await signIn();
  } catch (error) {
    setText(status, `Cannot reach the api: ${(error as Error).message}`);
    setTimeout(() => location.reload(), 5_000);
    return;
  }
  showRoute();
  await follow();
}

void start();

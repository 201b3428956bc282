/**
 * The five pages. Each is built once (its controls and filters persist
 * while the user moves between pages) and updated from the store.
 */
import uPlot from 'uplot';
import type { CostView, PoolRow, ProviderRow, ProxyRow, TrafficRow } from '../protocol.js';
import { cordonProxy, scalePool } from './connection.js';
import { clear, formatAge, formatBytes, h, KeyedTable, setText, type Column } from './dom.js';
import type { Store } from './store.js';

export interface Page {
  readonly el: HTMLElement;
  update(store: Store): void;
  /** The route's query (`#/proxies?provider=local`), applied on navigation. */
  route?(params: URLSearchParams): void;
}

const text =
  <T>(get: (t: T) => string): Column<T>['cell'] =>
  (td, item) =>
    setText(td, get(item));

function link(href: string, label: string): HTMLAnchorElement {
  return h('a', { href }, label);
}

/** Messages to the user about an action: a live region a screen reader reads. */
function notice(): HTMLParagraphElement {
  return h('p', { className: 'notice', role: 'status', 'aria-live': 'polite' });
}

// ---------------------------------------------------------------- Fleet

interface Tally {
  total: number;
  ready: number;
  healthy: number;
  unhealthy: number;
  leases: number;
  capacity: number;
}

export class FleetPage implements Page {
  readonly el: HTMLElement;
  private readonly summary = h('p', { className: 'summary' });
  private readonly byProvider: KeyedTable<[string, Tally]>;
  private readonly byPool: KeyedTable<[string, Tally]>;
  private readonly reasons: KeyedTable<[string, number]>;
  private readonly costs: KeyedTable<CostView['providers'][number]>;
  private readonly tenants: KeyedTable<CostView['tenants'][number]>;
  private currency = '';

  constructor() {
    const columns = (field: 'provider' | 'pool'): Array<Column<[string, Tally]>> => {
      const q = (key: string, extra = '') => `#/proxies?${field}=${encodeURIComponent(key)}${extra}`;
      const count = (title: string, get: (t: Tally) => number, extra: string): Column<[string, Tally]> => ({
        title,
        className: 'num',
        cell: (td, [key, t]) => {
          clear(td);
          td.appendChild(link(q(key, extra), String(get(t))));
        },
      });
      return [
        { title: field === 'provider' ? 'Provider' : 'Pool', cell: text(([k]) => k || '(standalone)') },
        count('Proxies', (t) => t.total, ''),
        count('Ready', (t) => t.ready, '&phase=Ready'),
        count('Healthy', (t) => t.healthy, '&health=healthy'),
        count('Unhealthy', (t) => t.unhealthy, '&health=unhealthy'),
        {
          title: 'Leases held / capacity',
          className: 'num',
          cell: text(([, t]) => `${t.leases} / ${t.capacity}`),
        },
      ];
    };
    this.byProvider = new KeyedTable('Fleet by provider', columns('provider'), ([k]) => k);
    this.byPool = new KeyedTable('Fleet by pool', columns('pool'), ([k]) => k);
    this.reasons = new KeyedTable(
      'Unhealthy reasons',
      [
        { title: 'Reason', cell: text(([r]) => r || '(none given)') },
        {
          title: 'Proxies',
          className: 'num',
          cell: (td, [r, n]) => {
            clear(td);
            td.appendChild(link(`#/proxies?health=unhealthy&text=${encodeURIComponent(r)}`, String(n)));
          },
        },
      ],
      ([r]) => r,
    );
    const money = (n: number) => `${n.toFixed(4)}${this.currency ? ` ${this.currency}` : ''}`;
    this.costs = new KeyedTable(
      'Cost by provider',
      [
        { title: 'Provider', cell: text((c) => c.provider) },
        { title: 'So far', className: 'num', cell: text((c) => money(c.total)) },
        { title: 'Per hour now', className: 'num', cell: text((c) => money(c.perHour)) },
        { title: 'Proxies of unknown price', className: 'num', cell: text((c) => String(c.unknownProxies)) },
      ],
      (c) => c.provider,
    );
    this.tenants = new KeyedTable(
      'Top tenants by traffic',
      [
        { title: 'Tenant', cell: text((t) => t.tenant) },
        { title: 'Bytes', className: 'num', cell: text((t) => formatBytes(t.bytes)) },
        { title: 'Traffic cost', className: 'num', cell: text((t) => money(t.cost)) },
      ],
      (t) => t.tenant,
    );
    this.el = h(
      'section',
      { 'aria-labelledby': 'fleet-h' },
      h('h1', { id: 'fleet-h' }, 'Fleet'),
      this.summary,
      this.byProvider.el,
      this.byPool.el,
      this.reasons.el,
      this.costs.el,
      this.tenants.el,
    );
  }

  update(store: Store): void {
    const providers = new Map<string, Tally>();
    const pools = new Map<string, Tally>();
    const reasons = new Map<string, number>();
    let leases = 0;
    let capacity = 0;
    const add = (m: Map<string, Tally>, key: string, p: ProxyRow) => {
      const t = m.get(key) ?? { total: 0, ready: 0, healthy: 0, unhealthy: 0, leases: 0, capacity: 0 };
      t.total++;
      if (p.phase === 'Ready') t.ready++;
      if (p.healthy) t.healthy++;
      else t.unhealthy++;
      t.leases += p.leases;
      t.capacity += p.maxLeases;
      m.set(key, t);
    };
    for (const p of store.proxies.values()) {
      add(providers, p.provider, p);
      add(pools, p.pool === '' ? '' : `${p.namespace}/${p.pool}`, p);
      if (!p.healthy) reasons.set(p.reason, (reasons.get(p.reason) ?? 0) + 1);
      leases += p.leases;
      capacity += p.maxLeases;
    }
    const sorted = <V>(m: Map<string, V>) => [...m].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    this.byProvider.update(sorted(providers));
    this.byPool.update(sorted(pools));
    this.reasons.update([...reasons].sort((a, b) => b[1] - a[1]));
    this.currency = store.cost?.currency ?? '';
    this.costs.update(store.cost?.providers ?? []);
    this.tenants.update(store.cost?.tenants ?? []);
    const tunnels = store.gateway?.present ? `; gateway tunnels open: ${store.gateway.activeTunnels}` : '';
    const cost = poolsCost(store.pools);
    setText(
      this.summary,
      `${store.proxies.size} Proxies; leases held ${leases} of ${capacity}${tunnels}; ${store.pools.length} pools${cost}`,
    );
  }
}

/** The pools' instance cost per hour, summed where known (`; pools cost 1.2000 USD/h, 1 unknown`). */
function poolsCost(pools: readonly PoolRow[]): string {
  let total = 0;
  let currency = '';
  let unknown = 0;
  for (const p of pools) {
    const m = /^([\d.]+) (\S+)$/.exec(p.costPerHour ?? '');
    if (!m) {
      if (p.costPerHour !== undefined) unknown++;
      continue;
    }
    total += Number(m[1]);
    currency = m[2]!;
  }
  if (currency === '' && unknown === 0) return '';
  return `; pools cost ${currency === '' ? 'unknown' : `${total.toFixed(4)} ${currency}/h`}${currency !== '' && unknown > 0 ? `, ${unknown} unknown` : ''}`;
}

// ---------------------------------------------------------------- Proxies

export class ProxiesPage implements Page {
  readonly el: HTMLElement;
  private readonly table: KeyedTable<ProxyRow>;
  private readonly count = h('p', { className: 'summary', role: 'status' });
  private readonly text = h('input', {
    type: 'search',
    id: 'proxy-filter',
    placeholder: 'name, address, key=value…',
  });
  private readonly provider = h('select', { id: 'proxy-provider' });
  private readonly pool = h('select', { id: 'proxy-pool' });
  private readonly phase = h('select', { id: 'proxy-phase' });
  private readonly health = h('select', { id: 'proxy-health' });
  private readonly message = notice();
  private store: Store | undefined;
  private canWrite = false;

  constructor() {
    const columns: Array<Column<ProxyRow>> = [
      { title: 'Proxy', cell: text((p) => p.id) },
      { title: 'Provider', cell: text((p) => p.provider) },
      { title: 'Pool', cell: text((p) => p.pool) },
      { title: 'Phase', cell: text((p) => (p.deleting ? `${p.phase} (deleting)` : p.phase)) },
      { title: 'Egress address', cell: text((p) => p.address) },
      {
        title: 'Health',
        cell: (td, p) => {
          // No verdict yet (no Healthy condition) is not a failure: say so.
          setText(td, p.healthy ? 'healthy' : p.reason === '' ? 'unknown' : `unhealthy: ${p.reason}`);
          td.className = p.healthy ? 'ok' : 'bad';
          td.title = p.message;
        },
      },
      {
        title: 'Latency',
        className: 'num',
        cell: text((p) => (p.latencyMillis > 0 ? `${p.latencyMillis} ms` : '')),
      },
      { title: 'Leases', className: 'num', cell: text((p) => `${p.leases} / ${p.maxLeases}`) },
      { title: 'Cooling', className: 'num', cell: text((p) => (p.cooling < 0 ? '' : String(p.cooling))) },
      {
        title: 'Attributes',
        cell: text((p) =>
          Object.entries(p.attributes)
            .map(([k, v]) => `${k}=${v}`)
            .join(' '),
        ),
      },
      { title: 'Age', cell: text((p) => formatAge(p.created, Date.now())) },
      {
        title: 'State',
        cell: (td, p, fresh) => {
          if (fresh) {
            const label = h('span');
            td.appendChild(label);
          }
          setText(td.firstChild as HTMLElement, p.cordoned ? 'cordoned' : p.draining ? 'draining' : '');
          let button = td.querySelector('button');
          if (this.canWrite && !button) {
            button = h('button', { type: 'button' });
            button.addEventListener('click', () => {
              const row = this.store?.proxies.get(p.id);
              if (!row) return;
              cordonProxy(row.id, !row.cordoned).then(
                () => setText(this.message, `${row.cordoned ? 'Uncordoned' : 'Cordoned'} ${row.id}`),
                (e: Error) => setText(this.message, `Could not change ${row.id}: ${e.message}`),
              );
            });
            td.appendChild(button);
          }
          if (button) {
            if (!this.canWrite) button.remove();
            else {
              setText(button, p.cordoned ? 'Uncordon' : 'Cordon');
              button.setAttribute('aria-label', `${p.cordoned ? 'Uncordon' : 'Cordon'} ${p.id}`);
            }
          }
        },
      },
      {
        title: 'Workflow',
        cell: (td, p) => {
          const a = td.querySelector('a');
          if (!p.workflowUrl) {
            a?.remove();
            return;
          }
          if (a) {
            if (a.getAttribute('href') !== p.workflowUrl) a.setAttribute('href', p.workflowUrl);
          } else {
            td.appendChild(
              h('a', { href: p.workflowUrl, target: '_blank', rel: 'noopener noreferrer' }, 'Workflow'),
            );
          }
        },
      },
    ];
    this.table = new KeyedTable('Proxies', columns, (p) => p.id);
    for (const [select, all] of [
      [this.provider, 'every provider'],
      [this.pool, 'every pool'],
      [this.phase, 'every phase'],
    ] as const)
      select.appendChild(h('option', { value: '' }, all));
    append(this.health, ['', 'every health'], ['healthy', 'healthy'], ['unhealthy', 'unhealthy']);
    const redraw = () => this.store && this.update(this.store);
    this.text.addEventListener('input', redraw);
    for (const s of [this.provider, this.pool, this.phase, this.health]) s.addEventListener('change', redraw);
    this.el = h(
      'section',
      { 'aria-labelledby': 'proxies-h' },
      h('h1', { id: 'proxies-h' }, 'Proxies'),
      h(
        'div',
        { className: 'filters' },
        h('label', { for: 'proxy-filter' }, 'Filter'),
        this.text,
        h('label', { for: 'proxy-provider' }, 'Provider'),
        this.provider,
        h('label', { for: 'proxy-pool' }, 'Pool'),
        this.pool,
        h('label', { for: 'proxy-phase' }, 'Phase'),
        this.phase,
        h('label', { for: 'proxy-health' }, 'Health'),
        this.health,
      ),
      this.count,
      this.message,
      h('div', { className: 'scroll' }, this.table.el),
    );
  }

  route(params: URLSearchParams): void {
    this.text.value = params.get('text') ?? '';
    for (const [select, key] of [
      [this.provider, 'provider'],
      [this.pool, 'pool'],
      [this.phase, 'phase'],
      [this.health, 'health'],
    ] as const) {
      const want = params.get(key) ?? '';
      if (want !== '' && ![...select.options].some((o) => o.value === want))
        select.appendChild(h('option', { value: want }, want));
      select.value = want;
    }
  }

  update(store: Store): void {
    this.store = store;
    this.canWrite = store.session?.canWrite === true;
    const all = store.proxyList();
    syncOptions(
      this.provider,
      all.map((p) => p.provider),
    );
    syncOptions(
      this.pool,
      all.filter((p) => p.pool !== '').map((p) => `${p.namespace}/${p.pool}`),
    );
    syncOptions(
      this.phase,
      all.map((p) => p.phase).filter((p) => p !== ''),
    );
    const words = this.text.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    const provider = this.provider.value;
    const pool = this.pool.value;
    const phase = this.phase.value;
    const health = this.health.value;
    const shown = all.filter(
      (p) =>
        (provider === '' || p.provider === provider) &&
        (pool === '' || `${p.namespace}/${p.pool}` === pool) &&
        (phase === '' || p.phase === phase) &&
        (health === '' || (health === 'healthy') === p.healthy) &&
        words.every((w) => haystack(p).includes(w)),
    );
    this.table.update(shown);
    setText(this.count, `${shown.length} of ${all.length} Proxies`);
  }
}

function haystack(p: ProxyRow): string {
  return [
    p.id,
    p.provider,
    p.pool,
    p.phase,
    p.address,
    p.reason,
    ...Object.entries(p.attributes).map(([k, v]) => `${k}=${v}`),
  ]
    .join(' ')
    .toLowerCase();
}

function append(select: HTMLSelectElement, ...options: Array<[string, string]>): void {
  for (const [value, label] of options) select.appendChild(h('option', { value }, label));
}

/** Keeps a filter's options to the values present (and the one chosen), in order. */
function syncOptions(select: HTMLSelectElement, values: string[]): void {
  const wanted = [...new Set([...values, select.value].filter((v) => v !== ''))].sort();
  const have = [...select.options].slice(1).map((o) => o.value);
  if (have.length === wanted.length && have.every((v, i) => v === wanted[i])) return;
  const chosen = select.value;
  while (select.options.length > 1) select.remove(1);
  for (const v of wanted) select.appendChild(h('option', { value: v }, v));
  select.value = chosen;
}

// ---------------------------------------------------------------- Pools

export class PoolsPage implements Page {
  readonly el: HTMLElement;
  private readonly table: KeyedTable<PoolRow>;
  private readonly charts = h('div', { className: 'charts' });
  private readonly plots = new Map<string, { plot: uPlot; figure: HTMLElement; last: number }>();
  private readonly message = notice();
  private canWrite = false;

  constructor() {
    const columns: Array<Column<PoolRow>> = [
      { title: 'Pool', cell: text((p) => p.id) },
      { title: 'Desired', className: 'num', cell: text((p) => String(p.desired)) },
      { title: 'Ready', className: 'num', cell: text((p) => String(p.readyMembers)) },
      { title: 'Updated', className: 'num', cell: text((p) => String(p.updated)) },
      { title: 'Draining', className: 'num', cell: text((p) => String(p.draining)) },
      { title: 'Leases', className: 'num', cell: text((p) => String(p.leases)) },
      { title: 'Cost/h', className: 'num', cell: text((p) => p.costPerHour ?? '') },
      { title: 'Last hour', className: 'num', cell: text((p) => p.costLastHour ?? '') },
      {
        title: 'Autoscaling',
        cell: text((p) =>
          p.autoscaling
            ? `${p.autoscaling.min}–${p.autoscaling.max}${p.autoscaling.utilizationPercent !== undefined ? `, ${p.autoscaling.utilizationPercent}% used` : ''}${p.autoscaling.recommendation !== undefined ? `, wants ${p.autoscaling.recommendation}` : ''}`
            : 'off',
        ),
      },
      {
        title: 'Rotation',
        cell: text((p) =>
          p.rotation
            ? `${p.rotation.rotatedTotal ?? 0} rotated${p.rotation.lastRotationReason ? ` (last: ${p.rotation.lastRotationReason})` : ''}`
            : '',
        ),
      },
      { title: 'Notes', cell: text((p) => p.notes.join('; ')) },
      {
        title: 'Scale',
        cell: (td, p, fresh) => {
          if (fresh && this.canWrite) {
            const input = h('input', {
              type: 'number',
              min: 0,
              max: 10000,
              value: p.specReplicas,
              'aria-label': `Replicas for ${p.id}`,
            });
            const button = h('button', { type: 'button' }, 'Scale');
            const form = h('form', { className: 'scale' }, input, button);
            const submit = (e: Event) => {
              e.preventDefault();
              const replicas = Number(input.value);
              if (!Number.isInteger(replicas) || replicas < 0) {
                setText(this.message, `Replicas for ${p.id} must be a whole number of 0 or more`);
                return;
              }
              scalePool(p.id, replicas).then(
                () => setText(this.message, `Scaled ${p.id} to ${replicas}`),
                (err: Error) => setText(this.message, `Could not scale ${p.id}: ${err.message}`),
              );
            };
            button.addEventListener('click', submit);
            form.addEventListener('submit', submit);
            td.appendChild(form);
          }
          const input = td.querySelector('input');
          if (input && document.activeElement !== input && input.dataset.spec !== String(p.specReplicas)) {
            input.value = String(p.specReplicas);
            input.dataset.spec = String(p.specReplicas);
          }
          if (!this.canWrite) setText(td, p.autoscaling ? '(autoscaled)' : String(p.specReplicas));
        },
      },
    ];
    this.table = new KeyedTable('Pools', columns, (p) => p.id);
    this.el = h(
      'section',
      { 'aria-labelledby': 'pools-h' },
      h('h1', { id: 'pools-h' }, 'Pools'),
      this.message,
      h('div', { className: 'scroll' }, this.table.el),
      h('h2', {}, 'The last hour'),
      h(
        'p',
        { className: 'hint' },
        'Sampled every 10 s in the api process; a restart starts the charts empty.',
      ),
      this.charts,
    );
  }

  update(store: Store): void {
    this.canWrite = store.session?.canWrite === true;
    this.table.update(store.pools);
    const live = new Set<string>();
    for (const pool of store.pools) {
      live.add(pool.id);
      this.chart(pool);
    }
    for (const [id, c] of this.plots) {
      if (!live.has(id)) {
        c.plot.destroy();
        c.figure.remove();
        this.plots.delete(id);
      }
    }
  }

  private chart(pool: PoolRow): void {
    const data: uPlot.AlignedData = [
      pool.history.map((p) => p.t),
      pool.history.map((p) => p.desired),
      pool.history.map((p) => p.ready),
      pool.history.map((p) => p.leases),
    ];
    const last = pool.history.at(-1)?.t ?? 0;
    let c = this.plots.get(pool.id);
    if (!c) {
      const figure = h('figure', {}, h('figcaption', {}, `${pool.id}: replicas and leases held`));
      this.charts.appendChild(figure);
      const plot = new uPlot(
        {
          width: Math.min(560, Math.max(280, window.innerWidth - 48)),
          height: 180,
          series: [
            {},
            { label: 'desired', stroke: '#6b7280' },
            { label: 'Ready', stroke: '#15803d' },
            { label: 'leases', stroke: '#1d4ed8' },
          ],
          scales: { y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
        },
        data,
        figure,
      );
      c = { plot, figure, last };
      this.plots.set(pool.id, c);
      return;
    }
    if (c.last !== last) {
      c.plot.setData(data);
      c.last = last;
    }
  }
}

// ---------------------------------------------------------------- Providers

export class ProvidersPage implements Page {
  readonly el: HTMLElement;
  private readonly empty = h('p', { className: 'hint' });
  private readonly table: KeyedTable<ProviderRow>;
  private readonly targets = h('div');

  constructor() {
    this.table = new KeyedTable(
      'Providers',
      [
        { title: 'Provider', cell: text((p) => p.name) },
        { title: 'Type', cell: text((p) => p.type) },
        {
          title: 'Ready',
          cell: (td, p) => {
            setText(td, p.ready ? 'ready' : 'not ready');
            td.className = p.ready ? 'ok' : 'bad';
          },
        },
        { title: 'Reason', cell: text((p) => p.reason) },
        { title: 'Last check says', cell: text((p) => p.message) },
        {
          title: 'Checked',
          cell: text((p) => (p.lastCheckTime ? `${formatAge(p.lastCheckTime, Date.now())} ago` : '')),
        },
      ],
      (p) => p.name,
    );
    this.el = h(
      'section',
      { 'aria-labelledby': 'providers-h' },
      h('h1', { id: 'providers-h' }, 'Providers'),
      this.empty,
      h('div', { className: 'scroll' }, this.table.el),
      this.targets,
    );
  }

  update(store: Store): void {
    this.table.update(store.providers);
    setText(
      this.empty,
      store.providers.length === 0
        ? 'No ProviderHealth yet: the worker’s provider checks write one per provider (every minute by default).'
        : '',
    );
    clear(this.targets);
    for (const p of store.providers) {
      if (p.targets.length === 0) continue;
      const t = new KeyedTable<ProviderRow['targets'][number]>(
        `Hosts of ${p.name}`,
        [
          { title: 'Host', cell: text((x) => x.name) },
          { title: 'Address', cell: text((x) => x.address) },
          { title: 'Ready', cell: text((x) => (x.ready ? 'ready' : 'not ready')) },
          { title: 'Reason', cell: text((x) => x.reason) },
          { title: 'Message', cell: text((x) => x.message) },
          {
            title: 'Latency',
            className: 'num',
            cell: text((x) => (x.latencyMillis !== undefined ? `${x.latencyMillis} ms` : '')),
          },
        ],
        (x) => x.name,
      );
      t.update(p.targets);
      this.targets.appendChild(h('div', { className: 'scroll' }, t.el));
    }
  }
}

// ---------------------------------------------------------------- Gateway

export class GatewayPage implements Page {
  readonly el: HTMLElement;
  private readonly summary = h('p', { className: 'summary' });
  private readonly proxies: KeyedTable<TrafficRow>;
  private readonly targets: KeyedTable<TrafficRow>;

  constructor() {
    const columns = (first: string): Array<Column<TrafficRow>> => [
      { title: first, cell: text((r) => r.key) },
      { title: 'Connections', className: 'num', cell: text((r) => String(r.connections)) },
      { title: 'Bytes/s', className: 'num', cell: text((r) => `${formatBytes(r.bytesPerSecond)}/s`) },
      { title: 'Bytes', className: 'num', cell: text((r) => formatBytes(r.bytesTotal)) },
      {
        title: 'Errors',
        cell: text((r) =>
          Object.entries(r.errors)
            .filter(([, n]) => n > 0)
            .map(([reason, n]) => `${reason} ${n}`)
            .join(', '),
        ),
      },
    ];
    this.proxies = new KeyedTable('Gateway traffic by proxy', columns('Proxy'), (r) => r.key);
    this.targets = new KeyedTable('Top targets', columns('Target'), (r) => r.key);
    this.el = h(
      'section',
      { 'aria-labelledby': 'gateway-h' },
      h('h1', { id: 'gateway-h' }, 'Gateway'),
      this.summary,
      h('div', { className: 'scroll' }, this.proxies.el),
      h('div', { className: 'scroll' }, this.targets.el),
    );
  }

  update(store: Store): void {
    const g = store.gateway;
    if (!g?.present) {
      setText(this.summary, 'No gateway runs in this api process: its figures are on its own /metrics.');
      this.proxies.update([]);
      this.targets.update([]);
      return;
    }
    const outcomes = Object.entries(g.requests)
      .map(([o, n]) => `${o} ${n}`)
      .join(', ');
    setText(
      this.summary,
      `Tunnels open: ${g.activeTunnels}; relaying ${formatBytes(g.bytesPerSecond)}/s; requests: ${outcomes || 'none yet'}`,
    );
    this.proxies.update(g.proxies);
    this.targets.update(g.targets);
  }
}

/** What the page holds: the latest of each event, the Proxies by id. */
import type {
  CostView,
  DashboardEvents,
  GatewayView,
  PoolRow,
  ProviderRow,
  ProxyRow,
  SessionInfo,
} from '../protocol.js';

export class Store {
  session: SessionInfo | undefined;
  readonly proxies = new Map<string, ProxyRow>();
  pools: PoolRow[] = [];
  providers: ProviderRow[] = [];
  gateway: GatewayView | undefined;
  cost: CostView | undefined;
  /** Bumped on every change, so a page can tell whether it needs to redraw. */
  version = 0;

  apply<K extends keyof DashboardEvents>(event: K, data: DashboardEvents[K]): void {
    switch (event) {
      case 'session':
        this.session = data as SessionInfo;
        break;
      case 'proxies': {
        const d = data as DashboardEvents['proxies'];
        if (d.full) this.proxies.clear();
        for (const id of d.remove) this.proxies.delete(id);
        for (const row of d.upsert) this.proxies.set(row.id, row);
        break;
      }
      case 'pools':
        this.pools = data as PoolRow[];
        break;
      case 'providers':
        this.providers = data as ProviderRow[];
        break;
      case 'gateway':
        this.gateway = data as GatewayView;
        break;
      case 'cost':
        this.cost = data as CostView;
        break;
      default:
        return;
    }
    this.version++;
  }

  /** Proxies in id order. */
  proxyList(): ProxyRow[] {
    return [...this.proxies.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }
}

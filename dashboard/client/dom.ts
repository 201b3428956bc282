/**
 * Building the page without innerHTML: every value a user wrote (names,
 * attributes, messages) goes in as text, so none can become markup.
 */
type Child = Node | string | number | false | null | undefined;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Record<string, string | boolean | number | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === false) continue;
    if (name === 'className') el.className = String(value);
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

export function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

/** Writes text only when it changed (a live table rewrites only what moved). */
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

export function clear(el: Element): void {
  while (el.firstChild) el.removeChild(el.firstChild);
}

export interface Column<T> {
  title: string;
  /** Fills the cell; `fresh` is true the first time (a cell's controls are made once and kept). */
  cell(td: HTMLTableCellElement, item: T, fresh: boolean): void;
  className?: string;
}

/**
 * A table whose rows are kept by key: an update adds, removes and reorders
 * rows and rewrites only the cells whose text changed, so a control being
 * used (a number being typed) is left alone.
 */
export class KeyedTable<T> {
  readonly el: HTMLTableElement;
  private readonly body: HTMLTableSectionElement;
  private readonly rows = new Map<string, HTMLTableRowElement>();

  constructor(
    label: string,
    private readonly columns: ReadonlyArray<Column<T>>,
    private readonly key: (item: T) => string,
  ) {
    this.body = h('tbody');
    this.el = h(
      'table',
      { 'aria-label': label },
      h('caption', {}, label),
      h(
        'thead',
        {},
        h('tr', {}, ...columns.map((c) => h('th', { scope: 'col', className: c.className }, c.title))),
      ),
      this.body,
    );
  }

  update(items: readonly T[]): void {
    const keep = new Set<string>();
    let at = 0;
    for (const item of items) {
      const k = this.key(item);
      keep.add(k);
      let tr = this.rows.get(k);
      const fresh = tr === undefined;
      if (!tr) {
        tr = h('tr', { 'data-key': k });
        for (const c of this.columns) tr.appendChild(h('td', { className: c.className }));
        this.rows.set(k, tr);
      }
      const cells = tr.children;
      this.columns.forEach((c, i) => c.cell(cells[i] as HTMLTableCellElement, item, fresh));
      const current = this.body.children[at];
      if (current !== tr) this.body.insertBefore(tr, current ?? null);
      at++;
    }
    for (const [k, tr] of this.rows) {
      if (!keep.has(k)) {
        tr.remove();
        this.rows.delete(k);
      }
    }
  }
}

export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n.toFixed(0) : n.toFixed(1)} ${units[i]}`;
}

export function formatAge(created: string, now: number): string {
  const t = Date.parse(created);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.floor((now - t) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

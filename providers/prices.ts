/**
 * What a providers-config entry costs (issue 53): the `prices:` block of an
 * entry and the file's one `currency:`, validated with the rest of the
 * config (providers/config.ts), and the lookups the cost meters and the
 * pool's budget use. Pure: no I/O, no prices fetched at run time (the
 * operator copies them from the cloud's price list; README, "What the
 * fleet costs").
 *
 *   currency: USD                 # once, at the top; required when any entry has prices
 *   providers:
 *     - name: aws-eu
 *       type: aws
 *       prices:
 *         perInstanceHour: { onDemand: 0.0104, spot: 0.0035 }   # any machine type not listed below
 *         machineTypes:
 *           t3.small: { onDemand: 0.0208, spot: 0.0070 }
 *         perGiB: 0.09            # traffic the gateway relays through one of its proxies
 *     - name: brightdata
 *       type: vendor
 *       prices: { perGiB: 8.4, perSession: 0.001 }
 *
 * Which hourly price applies: the Proxy's `placement.machineType` in
 * `machineTypes`, else `perInstanceHour`; `spot` when the entry makes Spot
 * instances (aws `market: spot`, gcp `provisioningModel: SPOT`), else
 * `onDemand`. A price not given is unknown, never zero: what it would
 * cost is reported as unknown.
 */
import { z } from 'zod';

/** A price in the file's currency: a finite number, zero or more. */
const price = z
  .number({ error: 'must be a number (a price in the config currency)' })
  .finite('must be a finite number')
  .nonnegative('must not be negative');

const hourlySchema = z.strictObject({
  /** An on-demand (standard) instance, per hour. */
  onDemand: price.optional(),
  /** A Spot instance, per hour: applies when the entry makes Spot instances. */
  spot: price.optional(),
});

export const pricesSchema = z.strictObject({
  /** Per instance and hour, for every machine type `machineTypes` does not list. */
  perInstanceHour: hourlySchema.optional(),
  /** Per instance and hour, by `placement.machineType`. */
  machineTypes: z.record(z.string().min(1, 'must not be empty'), hourlySchema).optional(),
  /** Per GiB (2^30 bytes) the gateway relays through the entry's proxies, both directions: a cloud's egress, a vendor's traffic. */
  perGiB: price.optional(),
  /** Per session (each Proxy of the entry, once): vendor entries only. */
  perSession: price.optional(),
});

export type EntryPrices = z.output<typeof pricesSchema>;

/** ISO 4217 currency code. */
export const currencySchema = z
  .string({ error: 'must be a currency code such as USD' })
  .regex(/^[A-Z]{3}$/, 'must be a three-letter ISO 4217 code such as USD or EUR');

export const GIB = 1024 ** 3;

/**
 * Phases in which a Proxy's instance exists and is billed: booting
 * (Provisioning), serving (Ready), failing its checks (Unhealthy) or
 * draining and being deleted (Deleting). Pending (nothing asked of the
 * provider yet) and Failed cost nothing.
 */
export const COSTING_PHASES: ReadonlySet<string> = new Set([
  'Provisioning',
  'Ready',
  'Unhealthy',
  'Deleting',
]);

/** An entry's prices as the cost meters and the pool read them. */
export interface EntryPricing {
  /** The entry makes Spot instances: the `spot` price applies. */
  spot: boolean;
  prices: EntryPrices;
}

/** The prices of every entry, and the file's currency (absent: no entry has prices). */
export interface PriceBook {
  currency?: string;
  /** By entry name; an entry without a `prices:` block is absent. */
  entries: Readonly<Record<string, EntryPricing>>;
}

export const EMPTY_PRICE_BOOK: PriceBook = { entries: {} };

/**
 * The hourly price of one instance of `provider` with this machine type, or
 * undefined when unknown (no prices, or none for this machine type and
 * market).
 */
export function instanceHourPrice(
  book: PriceBook,
  provider: string,
  machineType?: string,
): number | undefined {
  const entry = book.entries[provider];
  if (!entry) return undefined;
  const pick = (hourly: z.output<typeof hourlySchema> | undefined) =>
    hourly === undefined ? undefined : entry.spot ? hourly.spot : hourly.onDemand;
  const typed = machineType !== undefined ? entry.prices.machineTypes?.[machineType] : undefined;
  return typed !== undefined ? pick(typed) : pick(entry.prices.perInstanceHour);
}

/** The price per GiB relayed through a proxy of `provider`, or undefined when unknown. */
export function perGiBPrice(book: PriceBook, provider: string): number | undefined {
  return book.entries[provider]?.prices.perGiB;
}

/** The price of one session (one Proxy) of `provider`, or undefined (none given: a session is not charged by itself). */
export function perSessionPrice(book: PriceBook, provider: string): number | undefined {
  return book.entries[provider]?.prices.perSession;
}

/** Whether an entry of this type and config makes Spot instances. */
export function makesSpot(type: string, config: unknown): boolean {
  const c = config as { market?: unknown; provisioningModel?: unknown };
  return (type === 'aws' && c.market === 'spot') || (type === 'gcp' && c.provisioningModel === 'SPOT');
}

/** `0.0500 USD`: a cost as status and logs show it (four decimals: a proxy-hour is cents). */
export function formatCost(amount: number, currency: string | undefined): string {
  return `${amount.toFixed(4)}${currency ? ` ${currency}` : ''}`;
}

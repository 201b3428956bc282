/**
 * What a pool's instances cost and what its budget allows (issue 53), as
 * pure functions over the pool's state: the run rate at each look (members
 * running x their entry's hourly price, from the list activity), the cost
 * over the last hour and day from those rates, the members a
 * `spec.budget` pays for, and the BudgetLimited condition.
 *
 * Only instance time is counted here (what the pool's size decides);
 * relayed traffic costs what the crawl sends, whatever the size, and is in
 * the metrics (api/cost-meter.ts). A price the providers config does not
 * give is unknown: the status says `unknown` and a budget cannot be applied
 * (condition Unknown), never a cost of zero.
 *
 * Runs from before budgets never get here: their list results carry no
 * cost (PoolObservation.cost) and their desired state no budget.
 */
import type { ConditionSpec } from '../conditions.js';
import type { CostState, PoolBudget, PoolCostObservation, PoolState } from './types.js';

export const HOUR_MS = 3_600_000;
export const DAY_MS = 24 * HOUR_MS;
/** Rates kept at most (one per change of rate; a day of them is far fewer in practice). */
const MAX_RATES = 1_000;

/** The run rate per hour an observation shows, or undefined when the price is unknown. */
export function runRate(seen: PoolCostObservation): number | undefined {
  return seen.perInstanceHour === undefined ? undefined : seen.running * seen.perInstanceHour;
}

/** The hourly amount a budget allows: maxPerHour, or less when maxPerDay spread over 24 hours is less. */
export function hourlyLimit(budget: PoolBudget): { amount: number; from: 'maxPerHour' | 'maxPerDay' } {
  if (budget.maxPerDay !== undefined && budget.maxPerDay / 24 < budget.maxPerHour)
    return { amount: budget.maxPerDay / 24, from: 'maxPerDay' };
  return { amount: budget.maxPerHour, from: 'maxPerHour' };
}

/** Members the budget pays for at this price; undefined: no cap (no budget, an unknown price, or free instances). */
export function membersAllowed(
  budget: PoolBudget | undefined,
  perInstanceHour: number | undefined,
): number | undefined {
  if (!budget || perInstanceHour === undefined || perInstanceHour <= 0) return undefined;
  // The epsilon keeps 0.2 / 0.05 at 4, not 3.9999.
  return Math.floor(hourlyLimit(budget).amount / perInstanceHour + 1e-9);
}

/** Takes a look's cost observation in: the rate from now on, and what the budget allows. */
export function observeCost(state: PoolState, seen: PoolCostObservation, nowMs: number): CostState {
  const cost = (state.cost ??= { rates: [], seen });
  cost.seen = seen;
  const rate = runRate(seen) ?? -1;
  const last = cost.rates[cost.rates.length - 1];
  if (!last || last[1] !== rate) cost.rates.push([nowMs, rate]);
  // Keep what the longest window needs: the rate in force at its start and every one since.
  const windowMs = state.desired.budget?.maxPerDay !== undefined ? DAY_MS : HOUR_MS;
  while (cost.rates.length > 1 && cost.rates[1]![0] <= nowMs - windowMs) cost.rates.shift();
  while (cost.rates.length > MAX_RATES) cost.rates.shift();
  const allowed = membersAllowed(state.desired.budget, seen.perInstanceHour);
  if (allowed === undefined) delete cost.allowed;
  else cost.allowed = allowed;
  return cost;
}

/**
 * What the instances cost over the `windowMs` before `nowMs`, from the rates
 * seen (a pool younger than the window: since it was first seen); undefined
 * when any part of it was at an unknown price.
 */
export function spentOver(cost: CostState, nowMs: number, windowMs: number): number | undefined {
  const start = nowMs - windowMs;
  let total = 0;
  cost.rates.forEach(([atMs, rate], i) => {
    const from = Math.max(atMs, start);
    const to = i + 1 < cost.rates.length ? cost.rates[i + 1]![0] : nowMs;
    if (to <= from) return;
    total = rate < 0 || Number.isNaN(total) ? Number.NaN : total + (rate * (to - from)) / HOUR_MS;
  });
  return Number.isNaN(total) ? undefined : total;
}

/** Caps a size at what the budget allows (the pool's size never goes above it). */
export function withinBudget(state: PoolState, replicas: number): number {
  const allowed = state.cost?.allowed;
  return allowed === undefined ? replicas : Math.min(replicas, allowed);
}

/**
 * Whether replacing a member now (rotation: one more instance while the old
 * one drains) would take the last 24 hours over `maxPerDay`: what they cost
 * plus one instance-hour more. Undefined (not held) without a day budget
 * or a price; else what the last 24 hours cost.
 */
export function rotationOverDayBudget(state: PoolState, nowMs: number): { spent: number } | undefined {
  const day = state.desired.budget?.maxPerDay;
  const cost = state.cost;
  const price = cost?.seen.perInstanceHour;
  if (day === undefined || !cost || price === undefined) return undefined;
  const spent = spentOver(cost, nowMs, DAY_MS);
  return spent !== undefined && spent + price > day + 1e-9 ? { spent } : undefined;
}

const money = (amount: number, currency: string | undefined) =>
  `${amount.toFixed(4)}${currency ? ` ${currency}` : ''}`;
const proxies = (n: number) => `${n} ${n === 1 ? 'proxy' : 'proxies'}`;

/** `costPerHour` and `costLastHour` for the status. */
export function costStatus(cost: CostState, nowMs: number): { costPerHour: string; costLastHour: string } {
  const rate = runRate(cost.seen);
  const lastHour = spentOver(cost, nowMs, HOUR_MS);
  return {
    costPerHour: rate === undefined ? 'unknown' : money(rate, cost.seen.currency),
    costLastHour: lastHour === undefined ? 'unknown' : money(lastHour, cost.seen.currency),
  };
}

/**
 * BudgetLimited, for a pool with a budget: True while the size asked for
 * (the autoscaler's, or spec.replicas) is above what the budget pays for;
 * Unknown when the price is.
 */
export function budgetCondition(
  state: PoolState,
  provider: string,
  /** The size asked for before the budget: the autoscaler's want, or spec.replicas. */
  wanted: number,
  autoscaled: boolean,
  /** Rotation waits for the day's budget (rotationOverDayBudget's answer). */
  rotationHeld?: { spent: number },
): ConditionSpec | undefined {
  const budget = state.desired.budget;
  const cost = state.cost;
  if (!budget || !cost) return undefined;
  const { currency, perInstanceHour } = cost.seen;
  const limit = hourlyLimit(budget);
  const limitText =
    limit.from === 'maxPerHour'
      ? `budget.maxPerHour ${money(budget.maxPerHour, currency)}`
      : `budget.maxPerDay ${money(budget.maxPerDay!, currency)} (${money(limit.amount, currency)} an hour)`;
  if (perInstanceHour === undefined)
    return {
      type: 'BudgetLimited',
      status: 'Unknown',
      reason: 'PriceUnknown',
      message: `the providers config gives no hourly price for provider ${provider}: ${limitText} cannot be applied`,
    };
  const allowed = cost.allowed;
  const price = `${money(perInstanceHour, currency)} each per hour`;
  if (allowed !== undefined && wanted > allowed)
    return autoscaled
      ? {
          type: 'BudgetLimited',
          status: 'True',
          reason: 'BudgetLimited',
          message: `${limitText} allows ${proxies(allowed)} at ${price}; demand asks for up to ${wanted}`,
        }
      : {
          type: 'BudgetLimited',
          status: 'True',
          reason: 'ReplicasOverBudget',
          message: `spec.replicas ${wanted} is over what ${limitText} allows (${proxies(allowed)} at ${price}): kept as asked`,
        };
  if (rotationHeld)
    return {
      type: 'BudgetLimited',
      status: 'True',
      reason: 'RotationWaits',
      message: `rotation waits: the last 24 hours cost ${money(rotationHeld.spent, currency)} and a replacement's hour more would pass budget.maxPerDay ${money(budget.maxPerDay ?? 0, currency)}`,
    };
  return {
    type: 'BudgetLimited',
    status: 'False',
    reason: 'WithinBudget',
    message: `${proxies(wanted)} at ${price} is within ${limitText}${allowed !== undefined ? ` (it allows ${allowed})` : ''}`,
  };
}

/** A gateway flag or setting that cannot be used: the message names it. */
export class GatewayConfigError extends Error {
  override name = 'GatewayConfigError';
}

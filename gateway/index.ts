export {
  readGatewayConfig,
  gatewayOptionsSchema,
  GatewayConfigError,
  DEFAULT_GATEWAY_ADDR,
  DEV_GATEWAY_ADDR,
  DEV_GATEWAY_DEFAULTS,
  describeEgressPolicy,
  type GatewayFlags,
  type GatewayOptions,
} from './config.js';
export {
  parseUsername,
  decodeProxyAuthorization,
  GatewayCredentialsError,
  type ConnectionOptions,
} from './credentials.js';
export { createGateway, type CreateGatewayOptions, type Gateway, type GatewaySettings } from './server.js';

export { createApi, MAX_BODY_BYTES, rfc3339, type CreateApiOptions } from './app.js';
export {
  apiOptionsSchema,
  leaseStoreSchema,
  ApiConfigError,
  parseDuration,
  parseListenAddress,
  readApiConfig,
  requireAuthOffLoopback,
  DEFAULT_LEASE_TTL_SECONDS,
  DEFAULT_LISTEN_ADDRESS,
  DEFAULT_MAX_LEASE_TTL_SECONDS,
  type ApiFlags,
  type ApiOptions,
  type LeaseStoreConfig,
} from './config.js';
export { createInformerProxyCatalog, type InformerProxyCatalog } from './informer-catalog.js';
export {
  RedisLeaseStore,
  redactRedisUrl,
  DEFAULT_REDIS_PREFIX,
  type RedisLeaseStoreOptions,
} from './redis-lease-store.js';
export {
  LeaseStoreUnavailableError,
  storeKey,
  MemoryLeaseStore,
  newLeaseId,
  systemClock,
  DEFAULT_LEASE_COOLDOWN_MS,
  REPORT_RESULTS,
  type AcquireOutcome,
  type AcquireRequest,
  type AcquireStats,
  type Candidate,
  type Clock,
  type Lease,
  type LeaseStore,
  type ReportOutcome,
  type ReportResult,
} from './lease-store.js';
export { metricsHandler, registerApiMetrics, registerProcessMetrics, type ApiMetrics } from './metrics.js';
export {
  createStaticProxyCatalog,
  proxyViewFromResource,
  type ProxyCatalog,
  type ProxyView,
  type StaticProxyCatalog,
} from './proxy-catalog.js';
export { buildOpenApiDocument, ERROR_CODES, type ErrorCode } from './schemas.js';
export { serveApi, type RunningServer, type ServeOptions } from './server.js';
export {
  parseTraceparent,
  type TraceContext,
  type TraceHook,
  type TraceRequest,
  type TraceSpan,
} from '../tracing/http.js';

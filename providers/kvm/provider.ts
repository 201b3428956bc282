/**
 * The `kvm` provider: each instance is a libvirt domain on one of the
 * configured hosts, reached over SSH (ssh.ts) with `virsh` run on exec
 * channels (virsh.ts). Profile: providerID `hosts/<host>/domains/<name>`;
 * marks in the domain's `<metadata>` element plus a tiny `<name>.marks`
 * volume (so volumes left without a domain are still attributable and GC
 * can collect them); createdAt written at create; create synchronous and
 * resumable at every step; delete synchronous.
 *
 * This file is the wiring point: the hosts (hosts.ts), their volumes
 * (volumes.ts), base images (images.ts), domains (domains.ts), addresses
 * (addresses.ts), the listing (listing.ts) and the check (check.ts) are
 * built here once, in this provider's operation frame.
 */
import type { Logger } from 'pino';
import { KeyedMutex } from '../concurrency.js';
import { foreignOwner, parseIdOrFail } from '../shared/identity.js';
import { providerOperations, type Operations } from '../shared/operation.js';
import { pickPlacement } from '../shared/placement.js';
import { buildSeedIso } from '../shared/seed.js';
import {
  MARK_MANAGED,
  type CreateRequest,
  type Instance,
  type Listing,
  type Provider,
  type TargetStatus,
} from '../types.js';
import { domainAddress } from './addresses.js';
import { checkHost } from './check.js';
import { classify } from './classify.js';
import type { KvmConfig } from './config.js';
import { buildDomainXml, parseMarks, type InstanceMarks } from './domain-xml.js';
import { Domains, isUp, mapState, toInstance } from './domains.js';
import { Hosts, type HostHandle } from './hosts.js';
import { DOMAIN_NAME, formatProviderId, marksVolume, parseProviderId, seedVolume } from './ids.js';
import { Images, resolveImage, type ResolvedImage } from './images.js';
import { HostListings } from './listing.js';
import { GiB, Volumes } from './volumes.js';

export const KVM_PROVIDER_TYPE = 'kvm';

export interface KvmProviderOptions {
  name: string;
  config: KvmConfig;
  logger: Logger;
}

export function createKvmProvider(options: KvmProviderOptions): Provider {
  return new KvmProvider(options);
}

class KvmProvider implements Provider {
  readonly name: string;
  readonly type = KVM_PROVIDER_TYPE;
  readonly capabilities = { cheapListByTag: true } as const;
  private readonly cfg: KvmConfig;
  private readonly ops: Operations;
  private readonly hosts: Hosts;
  private readonly volumes: Volumes;
  private readonly images: Images;
  private readonly domains: Domains;
  private readonly listings: HostListings;
  /** In-process: concurrent creates (and deletes) of one instance. */
  private readonly nameLocks = new KeyedMutex();

  constructor(options: KvmProviderOptions) {
    this.name = options.name;
    this.cfg = options.config;
    this.ops = providerOperations({
      name: options.name,
      type: KVM_PROVIDER_TYPE,
      logger: options.logger,
      classify,
    });
    this.hosts = new Hosts(options.config, { type: KVM_PROVIDER_TYPE, name: options.name }, this.ops);
    this.volumes = new Volumes(this.hosts, this.ops, options.config.diskSizeGb * GiB);
    this.images = new Images(this.hosts, this.volumes, this.ops, options.config);
    this.domains = new Domains(this.hosts, this.volumes, this.ops);
    this.listings = new HostListings(this.hosts, this.ops);
  }

  private parseId(operation: 'get' | 'delete', id: string): { host: string; domain: string } {
    return parseIdOrFail(this.ops, operation, id, parseProviderId, 'hosts/<host>/domains/<name>');
  }

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = String(req.name);
    return this.ops.run('create', instance, signal, async () => {
      if (!DOMAIN_NAME.test(req.name) || !req.name.startsWith('proxy-'))
        throw this.ops.fail(
          'Permanent',
          'create',
          instance,
          'name is not an instance name (proxy-<16 base32>)',
        );
      if (typeof req.uid !== 'string' || req.uid === '')
        throw this.ops.fail('Permanent', 'create', instance, 'uid is empty');
      const hostNames = this.cfg.hosts.map((h) => h.name);
      const hostName = pickPlacement(this.ops, instance, 'zone', req.placement.zone, hostNames);
      const h = this.hosts.require('create', instance, hostName);
      const machineTypes = Object.keys(this.cfg.machineTypes);
      const mtKey = pickPlacement(this.ops, instance, 'machineType', req.placement.machineType, machineTypes);
      const machine = this.cfg.machineTypes[mtKey]!;
      const image = resolveImage(this.ops, this.cfg.images, instance, req.placement.image);
      const id = formatProviderId(hostName, req.name);
      return this.nameLocks.run(id, () => this.createLocked(req, h, machine, image, id, signal));
    });
  }

  /** Each step finds itself done on a retry; whatever a crash leaves is attributable by the marks volume. */
  private async createLocked(
    req: CreateRequest,
    h: HostHandle,
    machine: { vcpus: number; memoryMiB: number },
    image: ResolvedImage,
    id: string,
    signal: AbortSignal,
  ): Promise<string> {
    const log = this.ops.log.child({ host: h.config.name, name: req.name });
    const existing = await this.domains.xml(h, req.name, signal);
    if (existing !== undefined) {
      const owner = parseMarks(existing)?.uid;
      if (owner !== req.uid) throw foreignOwner(this.ops, id, 'a domain', owner ?? '', req.uid);
      await this.domains.ensureRunning(h, req.name, signal);
      log.debug('domain exists; ensured running');
      return id;
    }
    await this.domains.checkCapacity(h, machine, signal, id);
    const marks: InstanceMarks = {
      managed: true,
      uid: req.uid,
      installation: req.installation,
      createdAt: new Date(Math.floor(Date.now() / 1000) * 1000),
      namespace: req.namespace,
      proxyName: req.proxyName,
    };
    // 1. marks first: whatever a crash leaves behind stays attributable.
    const marksText = Buffer.from(JSON.stringify({ [MARK_MANAGED]: 'true', ...marks }) + '\n', 'utf8');
    const prior = await this.volumes.readMarks(h, req.name, signal);
    if (prior !== undefined && prior.uid !== req.uid)
      throw this.ops.fail(
        'Permanent',
        'create',
        id,
        'volumes with this name belong to another owner; not adopting them',
      );
    if (prior === undefined) await this.volumes.upload(h, marksVolume(req.name), marksText, signal);
    // 2. base image, 3. overlay (reused), 4. seed (always rebuilt), 5. domain, 6. running.
    const basePath = await this.images.ensure(h, image, log, signal);
    const overlayPath = await this.volumes.ensureOverlay(h, req.name, basePath, image.format, signal);
    const iso = buildSeedIso({
      instanceName: req.name,
      cloudInit: req.cloudInit,
      credentials: req.credentials,
      installGuestAgent: this.cfg.installGuestAgent,
      vendorData: this.cfg.vendorData,
    });
    await this.volumes.checkSpace(h, iso.length, signal, id);
    const seedPath = await this.volumes.upload(h, seedVolume(req.name), iso, signal);
    const xml = buildDomainXml({
      name: req.name,
      domainType: h.config.domainType,
      vcpus: machine.vcpus,
      memoryMiB: machine.memoryMiB,
      firmware: image.firmware,
      overlayPath,
      seedPath,
      network:
        h.config.network === 'user' ? { kind: 'user' } : { kind: 'bridge', bridge: h.config.bridge ?? '' },
      marks: { ...(prior ?? marks), managed: true },
    });
    await this.domains.define(h, xml, signal);
    log.debug('domain defined');
    await this.domains.ensureRunning(h, req.name, signal);
    log.info('domain created and running');
    return id;
  }

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', String(id), signal, async () => {
      const { host, domain } = this.parseId('get', id);
      const h = this.hosts.require('get', id, host);
      const xml = await this.domains.xml(h, domain, signal);
      if (xml === undefined) {
        // No domain: volumes left by a create that never finished are still ours to report (and collect).
        const marks = await this.volumes.readMarks(h, domain, signal);
        if (marks === undefined) throw this.ops.fail('NotFound', 'get', id, 'no such domain');
        return toInstance(id, 'Terminated', undefined, marks);
      }
      const state = await this.domains.state(h, domain, signal);
      let ip: string | undefined;
      if (isUp(state)) ip = await domainAddress(this.hosts, h, domain, xml, signal);
      return toInstance(id, mapState(state, ip), ip, parseMarks(xml));
    });
  }

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', String(id), signal, async () => {
      const { host, domain } = this.parseId('delete', id);
      const h = this.hosts.find(host);
      if (h === undefined) {
        // The seed's rule: a host removed from the config must not pin the Proxy's finalizer.
        this.ops.log.warn({ host, name: domain }, 'delete for a host that is not configured; nothing to do');
        return;
      }
      await this.nameLocks.run(id, async () => {
        await this.domains.remove(h, domain, id, signal);
        this.ops.log.info({ host, name: domain }, 'domain and volumes deleted');
      });
    });
  }

  listByTag(signal: AbortSignal): Promise<Listing> {
    return this.ops.run('list', '', signal, () => this.listings.list(signal));
  }

  async check(signal: AbortSignal): Promise<TargetStatus[]> {
    return Promise.all(this.hosts.all().map((h) => checkHost(this.hosts, this.volumes, h, signal)));
  }

  close(): Promise<void> {
    this.hosts.close();
    return Promise.resolve();
  }
}

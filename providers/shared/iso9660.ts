/**
 * A minimal ISO 9660 image writer with a Joliet supplementary descriptor:
 * one root directory of small files, which is all a NoCloud seed needs.
 * Built in memory, byte-identical for identical input (fixed timestamps),
 * so nothing is staged on disk and no external tool (genisoimage) is needed.
 *
 * Linux's isofs prefers the Joliet tree (names kept as written, in UCS-2);
 * the primary tree carries the same names with `;1`, which isofs maps back
 * to the plain name when Joliet is off.
 */

const SECTOR = 2048;

export interface IsoFile {
  name: string;
  data: Buffer;
}

function bothEndian32(buf: Buffer, offset: number, value: number): void {
  buf.writeUInt32LE(value, offset);
  buf.writeUInt32BE(value, offset + 4);
}

function bothEndian16(buf: Buffer, offset: number, value: number): void {
  buf.writeUInt16LE(value, offset);
  buf.writeUInt16BE(value, offset + 2);
}

/** 7-byte directory-record date: fixed, so builds are reproducible. */
function recordDate(buf: Buffer, offset: number): void {
  buf.set([100, 1, 1, 0, 0, 0, 0], offset); // 2000-01-01 00:00:00 UTC
}

/** 17-byte descriptor date. */
function descriptorDate(buf: Buffer, offset: number): void {
  buf.write('2000010100000000', offset, 'ascii');
  buf[offset + 16] = 0;
}

function directoryRecord(name: Buffer, lba: number, size: number, isDir: boolean): Buffer {
  const len = 33 + name.length + (name.length % 2 === 0 ? 1 : 0);
  const rec = Buffer.alloc(len);
  rec[0] = len;
  rec[1] = 0;
  bothEndian32(rec, 2, lba);
  bothEndian32(rec, 10, size);
  recordDate(rec, 18);
  rec[25] = isDir ? 2 : 0;
  bothEndian16(rec, 28, 1);
  rec[32] = name.length;
  name.copy(rec, 33);
  return rec;
}

function ucs2be(text: string): Buffer {
  const le = Buffer.from(text, 'utf16le');
  const be = Buffer.alloc(le.length);
  for (let i = 0; i < le.length; i += 2) {
    be[i] = le[i + 1]!;
    be[i + 1] = le[i]!;
  }
  return be;
}

function padField(buf: Buffer, offset: number, length: number, value: Buffer, pad: Buffer): void {
  for (let i = 0; i < length; i += pad.length) pad.copy(buf, offset + i, 0, Math.min(pad.length, length - i));
  value.copy(buf, offset, 0, Math.min(value.length, length));
}

/** File names allowed: what a NoCloud seed uses (lowercase letters, digits, dash, underscore, dot). */
const NAME = /^[a-z0-9][a-z0-9_.-]{0,63}$/;

export function buildIso9660(volumeLabel: string, files: IsoFile[]): Buffer {
  if (!/^[a-z0-9_]{1,16}$/i.test(volumeLabel))
    throw new Error('iso9660: volume label must be 1-16 of [A-Za-z0-9_]');
  for (const f of files) if (!NAME.test(f.name)) throw new Error('iso9660: unsupported file name');
  const sorted = [...files].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  // Layout: 16 system sectors, PVD, Joliet SVD, terminator, 4 path tables,
  // the two root directories, then the file data.
  const PVD = 16;
  const SVD = 17;
  const TERM = 18;
  const PATH_L = 19;
  const PATH_M = 20;
  const JPATH_L = 21;
  const JPATH_M = 22;
  const ROOT = 23;
  const JROOT = 24;
  let next = 25;
  const extents = sorted.map((f) => {
    const lba = next;
    next += Math.max(1, Math.ceil(f.data.length / SECTOR));
    return lba;
  });
  const total = next;

  const dirFor = (joliet: boolean, selfLba: number): Buffer => {
    const records = [
      directoryRecord(Buffer.from([0]), selfLba, SECTOR, true),
      directoryRecord(Buffer.from([1]), selfLba, SECTOR, true),
      ...sorted.map((f, i) =>
        directoryRecord(
          joliet ? ucs2be(f.name) : Buffer.from(`${f.name};1`, 'ascii'),
          extents[i]!,
          f.data.length,
          false,
        ),
      ),
    ];
    const dir = Buffer.concat(records);
    if (dir.length > SECTOR) throw new Error('iso9660: too many files for one directory sector');
    return dir;
  };

  const image = Buffer.alloc(total * SECTOR);
  const at = (lba: number) => lba * SECTOR;

  const descriptor = (lba: number, joliet: boolean, rootLba: number, pathL: number, pathM: number): void => {
    const d = image.subarray(at(lba), at(lba) + SECTOR);
    d[0] = joliet ? 2 : 1;
    d.write('CD001', 1, 'ascii');
    d[6] = 1;
    const space = Buffer.from(' ');
    const jspace = Buffer.from([0, 0x20]);
    if (joliet) {
      padField(d, 8, 32, Buffer.alloc(0), jspace);
      padField(d, 40, 32, ucs2be(volumeLabel), jspace);
      d.write('%/E', 88, 'ascii'); // UCS-2 level 3
    } else {
      padField(d, 8, 32, Buffer.alloc(0), space);
      padField(d, 40, 32, Buffer.from(volumeLabel, 'ascii'), space);
    }
    bothEndian32(d, 80, total);
    bothEndian16(d, 120, 1);
    bothEndian16(d, 124, 1);
    bothEndian16(d, 128, SECTOR);
    bothEndian32(d, 132, 10);
    d.writeUInt32LE(pathL, 140);
    d.writeUInt32BE(pathM, 148);
    directoryRecord(Buffer.from([0]), rootLba, SECTOR, true).copy(d, 156);
    for (const [off, len] of [
      [190, 128],
      [318, 128],
      [446, 128],
      [574, 128],
      [702, 37],
      [739, 37],
      [776, 37],
    ] as const)
      padField(d, off, len, Buffer.alloc(0), joliet ? jspace : space);
    descriptorDate(d, 813);
    descriptorDate(d, 830);
    d.write('0000000000000000', 847, 'ascii');
    d.write('0000000000000000', 864, 'ascii');
    d[881] = 1;
  };
  descriptor(PVD, false, ROOT, PATH_L, PATH_M);
  descriptor(SVD, true, JROOT, JPATH_L, JPATH_M);
  image[at(TERM)] = 255;
  image.write('CD001', at(TERM) + 1, 'ascii');
  image[at(TERM) + 6] = 1;

  const pathTable = (lba: number, rootLba: number, bigEndian: boolean): void => {
    const o = at(lba);
    image[o] = 1;
    image[o + 1] = 0;
    if (bigEndian) image.writeUInt32BE(rootLba, o + 2);
    else image.writeUInt32LE(rootLba, o + 2);
    if (bigEndian) image.writeUInt16BE(1, o + 6);
    else image.writeUInt16LE(1, o + 6);
    image[o + 8] = 0;
  };
  pathTable(PATH_L, ROOT, false);
  pathTable(PATH_M, ROOT, true);
  pathTable(JPATH_L, JROOT, false);
  pathTable(JPATH_M, JROOT, true);

  dirFor(false, ROOT).copy(image, at(ROOT));
  dirFor(true, JROOT).copy(image, at(JROOT));
  sorted.forEach((f, i) => f.data.copy(image, at(extents[i]!)));
  return image;
}

/** Reads back the root directory of an image this module wrote (tests, diagnostics). */
export function readIso9660(image: Buffer, joliet: boolean): { label: string; files: IsoFile[] } {
  const d = image.subarray((joliet ? 17 : 16) * SECTOR, (joliet ? 18 : 17) * SECTOR);
  if (d.toString('ascii', 1, 6) !== 'CD001') throw new Error('iso9660: no descriptor');
  const decode = (b: Buffer) => {
    if (!joliet) return b.toString('ascii');
    const le = Buffer.alloc(b.length);
    for (let i = 0; i < b.length; i += 2) {
      le[i] = b[i + 1]!;
      le[i + 1] = b[i]!;
    }
    return le.toString('utf16le');
  };
  const label = decode(d.subarray(40, 72)).replace(/[\s\0]+$/, '');
  const rootLba = d.readUInt32LE(156 + 2);
  const rootLen = d.readUInt32LE(156 + 10);
  const dir = image.subarray(rootLba * SECTOR, rootLba * SECTOR + rootLen);
  const files: IsoFile[] = [];
  for (let o = 0; o < dir.length && dir[o]! > 0; o += dir[o]!) {
    const nameLen = dir[o + 32]!;
    const rawName = dir.subarray(o + 33, o + 33 + nameLen);
    if ((dir[o + 25]! & 2) !== 0) continue;
    const lba = dir.readUInt32LE(o + 2);
    const size = dir.readUInt32LE(o + 10);
    files.push({ name: decode(rawName), data: image.subarray(lba * SECTOR, lba * SECTOR + size) });
  }
  return { label, files };
}

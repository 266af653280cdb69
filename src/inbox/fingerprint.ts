import { hash } from 'node:crypto';
import canonicalize from 'canonicalize';

/**
 * SHA-256 (hex) of the RFC 8785 canonical JSON of a command's data: key order and whitespace
 * do not change it, any change of value does.
 */
export function fingerprint(data: unknown): string {
  const canonical = canonicalize(data);
  if (canonical === undefined) throw new TypeError('fingerprint needs JSON data');
  // One call, no Hash object: the one-shot form is cheaper for inputs this small.
  return hash('sha256', canonical, 'hex');
}

// Preloaded (NODE_OPTIONS=--require) by the tests of E2B's domain layout:
// a resolver that answers every name under HUTCH_E2B_RESOLVE_DOMAIN (D and
// *.D) with the daemon on loopback, HUTCH_E2B_RESOLVE_ADDR (IP:PORT).
// dns.lookup answers the IP; connections to such a name on port 443 (the
// https:// URLs E2B's SDK builds from E2B_DOMAIN) go to PORT, the
// daemon's. Every other name resolves as usual. Used by TestE2BSDKDomain
// and scripts/e2b-suite.sh --domain, with NODE_EXTRA_CA_CERTS naming the
// test's CA.
'use strict'
const dns = require('node:dns')
const net = require('node:net')
const tls = require('node:tls')

const domain = (process.env.HUTCH_E2B_RESOLVE_DOMAIN || '').toLowerCase().replace(/\.$/, '')
const addr = process.env.HUTCH_E2B_RESOLVE_ADDR || ''
const at = addr.lastIndexOf(':')
const ip = addr.slice(0, at).replace(/^\[|\]$/g, '')
const port = Number(addr.slice(at + 1))
if (!domain || !net.isIP(ip) || !(port > 0)) {
  throw new Error(`resolve-domain: want HUTCH_E2B_RESOLVE_DOMAIN (a domain) and HUTCH_E2B_RESOLVE_ADDR (IP:PORT), got ${JSON.stringify(domain)} ${JSON.stringify(addr)}`)
}

function under (host) {
  const h = String(host || '').toLowerCase().replace(/\.$/, '')
  return h === domain || h.endsWith('.' + domain)
}

const family = net.isIP(ip)
const lookup = dns.lookup
dns.lookup = function (hostname, options, callback) {
  if (typeof options === 'function') {
    callback = options
    options = {}
  }
  if (!under(hostname)) return lookup.call(this, hostname, options, callback)
  const all = typeof options === 'object' && options && options.all
  process.nextTick(() => all ? callback(null, [{ address: ip, family }]) : callback(null, ip, family))
  return {}
}
const lookupPromise = dns.promises.lookup
dns.promises.lookup = async function (hostname, options) {
  if (!under(hostname)) return lookupPromise.call(this, hostname, options)
  return options && options.all ? [{ address: ip, family }] : { address: ip, family }
}

// toDaemon points the options of a connection to a name under the domain
// on port 443 (or 80) at the daemon's port.
function toDaemon (options) {
  if (options && typeof options === 'object' && under(options.host || options.servername)) {
    const p = Number(options.port || 443)
    if (p === 443 || p === 80) {
      options = { ...options, port, lookup: dns.lookup }
    }
  }
  return options
}

const tlsConnect = tls.connect
tls.connect = function (options, ...rest) {
  return tlsConnect.call(this, toDaemon(options), ...rest)
}
const netConnect = net.connect
net.connect = net.createConnection = function (options, ...rest) {
  return netConnect.call(this, toDaemon(options), ...rest)
}

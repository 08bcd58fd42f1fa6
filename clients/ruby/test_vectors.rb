#!/usr/bin/env ruby
# frozen_string_literal: true
#
# The protocol's test vectors (docs/protocol.md, "Test vectors"): this client derives every
# key it uses and every script's SHA1 as distlock/backends/redis_ops/lua/vectors.json says.
# Added when the client came into the repository (the stranger had no vectors to check).
#
#   ruby clients/ruby/test_vectors.rb [VECTORS_FILE]
#
# VECTORS_FILE (or DISTLOCK_VECTORS) defaults to vectors.json in DISTLOCK_SCRIPTS, else in the
# repository's lua folder; the scripts are read from that folder. Prints one line per
# mismatch and a summary; exits 1 when anything differs. Needs no server.

require 'json'
require_relative 'distlock_client'

LUA = if ENV['DISTLOCK_SCRIPTS'].to_s.empty?
        File.expand_path('../../distlock/backends/redis_ops/lua', __dir__)
      else
        ENV['DISTLOCK_SCRIPTS']
      end
FILE = ARGV[0] || ENV['DISTLOCK_VECTORS'] || File.join(LUA, 'vectors.json')

vectors = JSON.parse(File.read(FILE, encoding: 'UTF-8'))
failures = []
check = lambda do |what, got, want|
  failures << "#{what}: got #{got.inspect}, want #{want.inspect}" unless got == want
end

vectors['names'].each do |v|
  name = v['name']
  label = "#{name[0, 40].inspect} under #{v['prefix']}"
  valid = Distlock.validate_name!(name)
  check.call("#{label} code_points", valid.length, v['code_points'])
  check.call("#{label} utf8_hex", valid.b.unpack1('H*'), v['utf8_hex'])
  check.call("#{label} crc32", Zlib.crc32(valid.b), v['crc32'])
  check.call("#{label} bucket", Distlock.bucket(valid), v['bucket'])
  check.call("#{label} encoded", Distlock.encode_name(valid), v['encoded'])
  keys = Distlock::Keys.new(v['prefix'], name)
  check.call("#{label} hash_tag", keys.tag[/\{(.*)\}/, 1], v['hash_tag'])
  # The keys this client uses (it takes no semaphores and speaks no Redlock).
  got = { 'lock' => keys.lock, 'fence' => keys.fence, 'wait' => keys.wait, 'live' => keys.live,
          'held' => keys.held, 'about' => "#{keys.wait}|about",
          'wake' => keys.wakeup(vectors['token']), 'readers' => keys.readers,
          'rmeta' => keys.rmeta, 'shheld' => keys.shheld }
  got.each { |kind, key| check.call("#{label} key #{kind}", key, v['keys'][kind]) }
end

scripts = Distlock::Scripts.new(LUA)
vectors['scripts'].each do |name, sha|
  check.call("script #{name}.lua sha1", scripts[name].sha, sha)
end

# The negative vectors: what a client MUST refuse before it sends anything.
refuse = vectors['refuse']
refused = lambda do |what, value, check|
  check.call(value)
  failures << "#{what} #{value.inspect[0, 40]} was not refused"
rescue ArgumentError, Distlock::InvalidName
  nil
end
taken = lambda do |what, value, check|
  check.call(value)
rescue ArgumentError, Distlock::InvalidName => e
  failures << "#{what} #{value.inspect[0, 40]} was refused: #{e.message}"
end
name_check = Distlock.method(:validate_name!)
prefix_check = Distlock.method(:validate_prefix!)
lease_check = Distlock.method(:validate_lease!)
refuse['names'].each { |v| refused.call('name', v['name'], name_check) }
refuse['prefixes'].each { |v| refused.call('prefix', v['prefix'], prefix_check) }
refuse['accepted_prefixes'].each { |p| taken.call('prefix', p, prefix_check) }
refuse['leases_ms'].each { |ms| refused.call('lease', ms, lease_check) }
refuse['accepted_leases_ms'].each { |ms| taken.call('lease', ms, lease_check) }
refuse['tokens'].each { |t| refused.call('token', t, Distlock.method(:validate_token!)) }
negatives = %w[names prefixes leases_ms tokens].sum { |list| refuse[list].size }

failures.each { |line| puts "not ok - #{line}" }
checked = "#{vectors['names'].size} names, #{vectors['scripts'].size} scripts, " \
          "#{negatives} values to refuse"
if failures.empty?
  puts "ok - #{checked}: every vector derived (#{FILE})"
else
  puts "FAILED - #{failures.size} vector(s) not derived, of #{checked} (#{FILE})"
  exit 1
end

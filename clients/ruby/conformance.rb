#!/usr/bin/env ruby
# frozen_string_literal: true
#
# The conformance line protocol: one JSON request per line on stdin, one JSON reply per
# line on stdout. Environment: DISTLOCK_URL, DISTLOCK_KEY_PREFIX, DISTLOCK_SCRIPTS,
# DISTLOCK_CLUSTER.

require_relative 'distlock_client'

$stdout.sync = true
STDOUT_LOCK = $stdout

def log(msg)
  warn "[distlock-ruby #{Process.pid}] #{msg}" if ENV['DISTLOCK_DEBUG']
end

url = ENV.fetch('DISTLOCK_URL', 'redis://127.0.0.1:6379/0')
prefix = ENV['DISTLOCK_KEY_PREFIX']
prefix = 'distlock' if prefix.nil? || prefix.empty?
scripts = ENV['DISTLOCK_SCRIPTS']
scripts = File.expand_path('../lua', __dir__) if scripts.nil? || scripts.empty?
cluster = ENV['DISTLOCK_CLUSTER'] == '1'

client = Distlock::Client.new(url: url, prefix: prefix, scripts_dir: scripts, cluster: cluster,
                              default_purpose: 'distlock-ruby conformance',
                              logger: method(:log))

def need(req, field)
  raise ArgumentError, "missing field #{field}" unless req.key?(field)

  req[field]
end

def handle(client, req)
  case req['op']
  when 'hello'
    { 'client' => "distlock-ruby #{Distlock::VERSION}", 'features' => %w[exclusive shared] }
  when 'acquire'
    wait = req['wait_ms']
    got = client.acquire(need(req, 'name'), ttl_ms: need(req, 'ttl_ms'), wait_ms: wait,
                                            shared: req['shared'] ? true : false,
                                            purpose: req['purpose'])
    if got
      { 'acquired' => true, 'token' => got.token, 'fencing' => got.fence }
    else
      { 'acquired' => false }
    end
  when 'release'
    { 'released' => client.release(need(req, 'name'), need(req, 'token'),
                                   shared: req['shared'] ? true : false) }
  when 'extend'
    { 'extended' => client.extend(need(req, 'name'), need(req, 'token'),
                                  ttl_ms: need(req, 'ttl_ms'),
                                  shared: req['shared'] ? true : false) }
  when 'holder'
    h = client.holder(need(req, 'name'))
    if h
      { 'holder' => { 'token' => h['token'], 'fencing' => h['fence'], 'host' => h['host'],
                      'pid' => h['pid'], 'purpose' => h['purpose'], 'shared' => h['shared'] } }
    else
      { 'holder' => nil }
    end
  else
    raise ArgumentError, "unknown op #{req['op'].inspect}"
  end
end

$stdin.each_line do |line|
  line = line.strip
  next if line.empty?

  id = nil
  reply = begin
    req = JSON.parse(line)
    raise ArgumentError, 'a request is a JSON object' unless req.is_a?(Hash)

    id = req['id']
    { 'id' => id, 'ok' => true }.merge(handle(client, req))
  rescue StandardError => e
    log("#{e.class}: #{e.message}")
    { 'id' => id, 'ok' => false, 'error' => "#{e.class}: #{e.message}" }
  end
  STDOUT_LOCK.write(JSON.generate(reply) + "\n")
  STDOUT_LOCK.flush
end

client.close
exit 0

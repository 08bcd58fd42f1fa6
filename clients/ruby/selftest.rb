#!/usr/bin/env ruby
# frozen_string_literal: true
#
# Self-tests: drive several conformance.rb processes (as the runner would) against a real
# redis-server. Usage: DISTLOCK_URL=redis://127.0.0.1:PORT/0 ruby selftest.rb

require 'json'
require 'open3'
require 'redis'
require 'zlib'

URL = ENV.fetch('DISTLOCK_URL')
ENV['DISTLOCK_SCRIPTS'] ||= File.expand_path('../lua', __dir__)
ENV['DISTLOCK_KEY_PREFIX'] ||= 'distlock'
PROG = File.expand_path('conformance.rb', __dir__)
CLUSTER = ENV["DISTLOCK_CLUSTER"] == "1"
R = CLUSTER ? Redis.new(cluster: [URL]) : Redis.new(url: URL)
# Every node (one server, or each master of a Cluster).
NODES = if CLUSTER
          Redis.new(url: URL).cluster("nodes").split("\n").grep(/master/).map do |l|
            Redis.new(url: "redis://" + l.split[1].split("@").first)
          end
        else
          [R]
        end
def flush_scripts = NODES.each { |n| n.script(:flush) }

def mono = Process.clock_gettime(Process::CLOCK_MONOTONIC, :float_millisecond)

class Proc1
  attr_reader :pid

  def initialize
    @in, @out, @err, @thr = Open3.popen3('ruby', PROG)
    @pid = @thr.pid
    @id = 0
    @pending = {}
    req("hello")
  end

  def send(op, **fields)
    @id += 1
    @in.puts(JSON.generate({ 'id' => @id, 'op' => op }.merge(fields.transform_keys(&:to_s))))
    @in.flush
    @id
  end

  def recv(timeout = 30)
    ready = IO.select([@out], nil, nil, timeout)
    raise "no reply in #{timeout}s" unless ready

    line = @out.gets
    raise "EOF; stderr: #{@err.read}" unless line

    JSON.parse(line)
  end

  def req(op, **fields)
    id = send(op, **fields)
    r = recv
    raise "id mismatch #{r}" unless r['id'] == id

    r
  end

  def acquire(name, ttl: 10_000, wait: 0, shared: false, purpose: nil)
    req('acquire', name: name, ttl_ms: ttl, wait_ms: wait, shared: shared, purpose: purpose)
  end

  def kill9
    Process.kill('KILL', @pid)
    @thr.join
  end

  def close
    @in.close
    @thr.join
  end
end

$fails = 0
def check(what, cond, detail = nil)
  puts "#{cond ? 'ok  ' : 'FAIL'} #{what}#{detail ? " (#{detail})" : ''}"
  $fails += 1 unless cond
end

def t_basic
  a = Proc1.new
  h = a.req('hello')
  check 'hello', h['ok'] && h['features'].include?('exclusive'), h
  r = a.acquire('basic', ttl: 5000, purpose: 'basic test')
  check 'acquire free lock', r['acquired'] && r['token'] =~ /\A\h{32}\z/ && r['fencing'] =~ /\A\d+\z/, r
  r2 = a.acquire('basic', ttl: 5000)
  check 'try-once on held lock fails', r2['ok'] && r2['acquired'] == false, r2
  ho = a.req('holder', name: 'basic')['holder']
  check 'holder metadata', ho && ho['token'] == r['token'] && ho['fencing'] == r['fencing'] &&
                           ho['pid'] == a.pid && ho['purpose'] == 'basic test' && ho['host'] &&
                           ho['shared'] == false, ho
  e = a.req('extend', name: 'basic', token: r['token'], ttl_ms: 60_000, shared: false)
  pttl = R.pttl('distlock:{b%04d}:lock:basic' % (Zlib.crc32('basic') % 1024))
  check 'extend', e['extended'] == true && pttl > 50_000, "#{e} pttl=#{pttl}"
  e2 = a.req('extend', name: 'basic', token: 'f' * 32, ttl_ms: 60_000, shared: false)
  check 'extend with a wrong token', e2['extended'] == false, e2
  rl = a.req('release', name: 'basic', token: r['token'], shared: false)
  check 'release', rl['released'] == true, rl
  rl2 = a.req('release', name: 'basic', token: r['token'], shared: false)
  check 'second release says not held', rl2['released'] == false, rl2
  check 'holder after release is null', a.req('holder', name: 'basic')['holder'].nil?
  r3 = a.acquire('basic', ttl: 5000)
  check 'fencing rises', r3['fencing'].to_i > r['fencing'].to_i, [r['fencing'], r3['fencing']]
  a.req('release', name: 'basic', token: r3['token'], shared: false)
  bad = a.acquire('', ttl: 1000)
  check 'empty name refused', bad['ok'] == false, bad
  bad = a.acquire("a\nb", ttl: 1000)
  check 'control char refused', bad['ok'] == false, bad
  x = a.acquire('basic', ttl: 150)
  sleep 0.3
  check 'lease ends by itself', a.req('holder', name: 'basic')['holder'].nil?
  e3 = a.req('extend', name: 'basic', token: x['token'], ttl_ms: 1000, shared: false)
  check 'extend after lease end is false', e3['extended'] == false, e3
  a.close
end

def t_fifo
  name = 'fifo {1}'
  h = Proc1.new
  ws = Array.new(3) { Proc1.new }
  r = h.acquire(name, ttl: 30_000)
  ws.each_with_index do |w, i|
    w.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: false, purpose: "w#{i}")
    sleep 0.15
  end
  sleep 1.37 # the waiters are mid-BLPOP
  t0 = mono
  h.req('release', name: name, token: r['token'], shared: false)
  got = []
  fences = [r['fencing'].to_i]
  ws.each_with_index do |w, i|
    g = w.recv
    dt = mono - (i.zero? ? t0 : got.last[1])
    got << [i, mono, g]
    check "waiter #{i} acquires in order", g['acquired'], g
    check "waiter #{i} woken by the release quickly", dt < 60, "#{dt.round(1)} ms"
    fences << g['fencing'].to_i
    holder = w.req('holder', name: name)['holder']
    check "waiter #{i} is the holder", holder['token'] == g['token'] && holder['purpose'] == "w#{i}"
    # The others must still be waiting.
    ws[(i + 1)..].each { |o| check 'others still waiting', IO.select([o.instance_variable_get(:@out)], nil, nil, 0).nil? }
    sleep 0.4
    w.req('release', name: name, token: g['token'], shared: false)
    got[-1][1] = mono
  end
  check 'fencing strictly rising along the queue', fences.each_cons(2).all? { |a, b| b > a }, fences
  [h, *ws].each(&:close)
end

def t_wait_timeout
  name = 'timeout'
  h = Proc1.new
  w = Proc1.new
  r = h.acquire(name, ttl: 30_000)
  t = mono
  g = w.acquire(name, ttl: 1000, wait: 700)
  dt = mono - t
  check 'wait_ms runs out', g['acquired'] == false && dt >= 690 && dt < 900, "#{dt.round} ms"
  k = ("distlock:{b%04d}:wait:" % (Zlib.crc32(name) % 1024)) + name
  check 'left the queue', R.zcard(k).zero? && R.zcard(k.sub(':wait:', ':live:')).zero?
  h.req('release', name: name, token: r['token'], shared: false)
  [h, w].each(&:close)
end

def t_sigkill_holder
  name = 'killed holder'
  h = Proc1.new
  w = Proc1.new
  r = h.acquire(name, ttl: 2000)
  t = mono
  h.kill9
  g = w.acquire(name, ttl: 5000, wait: 5000)
  dt = mono - t
  check 'lock of a SIGKILLed holder taken after its lease', g['acquired'] && dt > 1900 && dt < 2200,
        "#{dt.round} ms"
  check 'fence above the dead one', g['fencing'].to_i > r['fencing'].to_i
  w.req('release', name: name, token: g['token'], shared: false)
  w.close
end

def t_sigkill_waiter
  name = 'killed waiter'
  h = Proc1.new
  w1 = Proc1.new
  w2 = Proc1.new
  r = h.acquire(name, ttl: 30_000)
  w1.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: false, purpose: nil)
  sleep 0.2
  w2.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: false, purpose: nil)
  sleep 0.3
  w1.kill9
  t = mono
  h.req('release', name: name, token: r['token'], shared: false)
  g = w2.recv
  dt = mono - t
  check 'a dead waiter handed the lock costs the next one <= 2 x grace', g['acquired'] && dt < 600,
        "#{dt.round} ms"
  w2.req('release', name: name, token: g['token'], shared: false)
  [h, w2].each(&:close)
end

def t_noscript
  name = 'noscript'
  h = Proc1.new
  w = Proc1.new
  r = h.acquire(name, ttl: 30_000)
  w.send('acquire', name: name, ttl_ms: 30_000, wait_ms: 5000, shared: false, purpose: nil)
  sleep 0.3
  flush_scripts
  sleep 1.2 # the waiter's next pipelined EVALSHA hits NOSCRIPT
  flush_scripts
  h.req('release', name: name, token: r['token'], shared: false)
  g = w.recv
  check 'waiting survives SCRIPT FLUSH', g['acquired'], g
  flush_scripts
  rl = w.req('release', name: name, token: g['token'], shared: false)
  check 'release after SCRIPT FLUSH', rl['released'], rl
  [h, w].each(&:close)
end

def t_shared
  name = 'shared one'
  r1 = Proc1.new
  r2 = Proc1.new
  wr = Proc1.new
  r3 = Proc1.new
  a = r1.acquire(name, ttl: 30_000, shared: true, purpose: 'reader 1')
  b = r2.acquire(name, ttl: 30_000, shared: true, purpose: 'reader 2')
  check 'two shared holders at once', a['acquired'] && b['acquired'], [a, b]
  check 'shared tokens differ, fences rise', a['token'] != b['token'] && b['fencing'].to_i > a['fencing'].to_i
  ho = r1.req('holder', name: name)['holder']
  check 'holder of a shared lock', ho && ho['shared'] == true && [a['token'], b['token']].include?(ho['token']) &&
                                   ho['purpose'].start_with?('reader'), ho
  x = wr.acquire(name, ttl: 30_000, wait: 0)
  check 'exclusive try-once refused while shared held', x['acquired'] == false, x
  e = r1.req('extend', name: name, token: a['token'], ttl_ms: 40_000, shared: true)
  check 'shared extend', e['extended'] == true, e
  wr.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: false, purpose: 'writer')
  sleep 0.3
  r3.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: true, purpose: 'reader 3')
  sleep 0.3
  check 'a queued writer keeps a later reader out', IO.select([r3.instance_variable_get(:@out)], nil, nil, 0).nil?
  r1.req('release', name: name, token: a['token'], shared: true)
  sleep 0.2
  check 'writer still waits while one reader holds', IO.select([wr.instance_variable_get(:@out)], nil, nil, 0).nil?
  t = mono
  rel = r2.req('release', name: name, token: b['token'], shared: true)
  check 'shared release', rel['released'] == true, rel
  g = wr.recv
  dt = mono - t
  check 'writer gets it when the last reader leaves, promptly', g['acquired'] && dt < 60, "#{dt.round(1)} ms"
  check 'writer fence above readers', g['fencing'].to_i > b['fencing'].to_i
  ho = wr.req('holder', name: name)['holder']
  check 'holder is the writer', ho['token'] == g['token'] && ho['shared'] == false, ho
  t = mono
  wr.req('release', name: name, token: g['token'], shared: false)
  g3 = r3.recv
  dt = mono - t
  check 'reader 3 gets it after the writer, promptly', g3['acquired'] && g3['token'].start_with?('~') && dt < 60,
        "#{dt.round(1)} ms"
  rel = r3.req('release', name: name, token: g3['token'], shared: true)
  rel2 = r3.req('release', name: name, token: g3['token'], shared: true)
  check 'shared release twice: true then false', rel['released'] && rel2['released'] == false
  [r1, r2, wr, r3].each(&:close)
end

def t_shared_batch
  name = 'batch'
  w = Proc1.new
  rs = Array.new(3) { Proc1.new }
  x = w.acquire(name, ttl: 30_000)
  rs.each { |r| r.send('acquire', name: name, ttl_ms: 30_000, wait_ms: 5000, shared: true, purpose: nil) }
  sleep 0.5
  t = mono
  w.req('release', name: name, token: x['token'], shared: false)
  gs = rs.map(&:recv)
  dt = mono - t
  check 'a release hands the lock to the whole run of readers', gs.all? { |g| g['acquired'] } && dt < 100, "#{dt.round} ms"
  gs.each_with_index { |g, i| rs[i].req('release', name: name, token: g['token'], shared: true) }
  check 'lock free afterwards', w.req('holder', name: name)['holder'].nil?
  [w, *rs].each(&:close)
end

def t_shared_killed
  name = 'killed reader'
  r = Proc1.new
  w = Proc1.new
  a = r.acquire(name, ttl: 1500, shared: true)
  r.kill9
  t = mono
  g = w.acquire(name, ttl: 1000, wait: 4000)
  dt = mono - t
  check 'exclusive takes over from a SIGKILLed reader after its lease', g['acquired'] && dt > 1400 && dt < 1700,
        "#{dt.round} ms"
  w.req('release', name: name, token: g['token'], shared: false)
  w.close
end

def t_shared_leave
  name = 'shared leave'
  r1 = Proc1.new
  wr = Proc1.new
  r2 = Proc1.new
  a = r1.acquire(name, ttl: 30_000, shared: true)
  wr.send('acquire', name: name, ttl_ms: 30_000, wait_ms: 1500, shared: false, purpose: 'writer')
  sleep 0.3
  r2.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: true, purpose: 'late reader')
  t = mono
  g = wr.recv
  check 'writer gives up after wait_ms', g['acquired'] == false, g
  g2 = r2.recv
  dt = mono - t
  check 'the reader it kept out joins when it leaves (woken, promptly)', g2['acquired'] && dt < 1400, "#{dt.round} ms after writer started"
  x = r1.req('extend', name: name, token: a['token'], ttl_ms: 1000, shared: false)
  check 'exclusive extend of a shared token is false', x['extended'] == false, x
  x = r1.req('release', name: name, token: a['token'], shared: false)
  check 'exclusive release of a shared token is false', x['released'] == false, x
  # a shared waiter that times out behind a writer
  r1.req('release', name: name, token: a['token'], shared: true)
  r2.req('release', name: name, token: g2['token'], shared: true)
  e = wr.acquire(name, ttl: 30_000)
  t = mono
  s = r1.acquire(name, ttl: 1000, wait: 600, shared: true)
  dt = mono - t
  check 'shared wait_ms runs out', s['acquired'] == false && dt > 590 && dt < 800, "#{dt.round} ms"
  k = ("distlock:{b%04d}:wait:" % (Zlib.crc32(name) % 1024)) + name.gsub(' ', '%20')
  check 'shared waiter left the queue', R.zcard(k).zero?, R.zrange(k, 0, -1)
  wr.req('release', name: name, token: e['token'], shared: false)
  [r1, wr, r2].each(&:close)
end

def t_dead_waiter_dropped
  name = 'dead waiter dropped'
  h = Proc1.new
  w1 = Proc1.new
  w2 = Proc1.new
  r = h.acquire(name, ttl: 30_000)
  w1.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: false, purpose: nil)
  sleep 0.3
  w2.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: false, purpose: nil)
  sleep 0.3
  w1.kill9
  sleep 2.5 # its registration (max block + margin) has run out
  t = mono
  h.req('release', name: name, token: r['token'], shared: false)
  g = w2.recv
  dt = mono - t
  check 'a waiter dead for > 2 s is skipped: the next one is woken at once', g['acquired'] && dt < 60, "#{dt.round(1)} ms"
  w2.req('release', name: name, token: g['token'], shared: false)
  [h, w2].each(&:close)
end

def t_mixed_order
  name = 'mixed order'
  x = Proc1.new
  r1 = Proc1.new
  w2 = Proc1.new
  r3 = Proc1.new
  out = ->(p) { p.instance_variable_get(:@out) }
  hx = x.acquire(name, ttl: 30_000)
  r1.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: true, purpose: 'r1')
  sleep 0.2
  w2.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: false, purpose: 'w2')
  sleep 0.2
  r3.send('acquire', name: name, ttl_ms: 30_000, wait_ms: nil, shared: true, purpose: 'r3')
  sleep 0.3
  x.req('release', name: name, token: hx['token'], shared: false)
  g1 = r1.recv
  sleep 0.3
  check 'release hands to the reader at the head only (not past the writer)',
        g1['acquired'] && IO.select([out.(w2), out.(r3)], nil, nil, 0).nil?
  r1.req('release', name: name, token: g1['token'], shared: true)
  g2 = w2.recv
  sleep 0.3
  check 'then the writer', g2['acquired'] && IO.select([out.(r3)], nil, nil, 0).nil?
  w2.req('release', name: name, token: g2['token'], shared: false)
  g3 = r3.recv
  check 'then the last reader', g3['acquired']
  f = [hx, g1, g2, g3].map { |g| g['fencing'].to_i }
  check 'fences rise across kinds', f.each_cons(2).all? { |a, b| b > a }, f
  r3.req('release', name: name, token: g3['token'], shared: true)
  [x, r1, w2, r3].each(&:close)
end

def t_unicode
  a = Proc1.new
  name = "ордер 🔒 *{x}"
  r = a.acquire(name, ttl: 5000)
  enc = name.b.bytes.map { |b| b.chr =~ %r{[A-Za-z0-9\-._~:/@+=,]} ? b.chr : format('%%%02X', b) }.join
  key = ("distlock:{b%04d}:lock:" % (Zlib.crc32(name.b) % 1024)) + enc
  check 'unicode name key', R.exists?(key), key
  a.req('release', name: name, token: r['token'], shared: false)
  a.close
end

NODES.each(&:flushdb)
tests = ARGV.empty? ? %w[basic unicode fifo wait_timeout noscript sigkill_holder sigkill_waiter shared shared_batch shared_killed shared_leave dead_waiter_dropped mixed_order] : ARGV
tests.each do |t|
  puts "== #{t}"
  send("t_#{t}")
end
puts $fails.zero? ? 'ALL OK' : "#{$fails} FAILED"
exit($fails.zero? ? 0 : 1)

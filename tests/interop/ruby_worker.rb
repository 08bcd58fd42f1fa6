# The Ruby side of the error-path tests (tests/interop/test_client_error_path.py):
# `ruby ruby_worker.rb LIBRARY URL SCRIPTS TIMEOUT_S CONNECT_TIMEOUT_S COMMAND ARGS...`, the
# twin of node_worker.mjs's commands of the same names. The key prefix is the tests' ("test").
# Prints one line per event; reads "go" (and "next", "checked") on stdin.
library, url, scripts, timeout, connect_timeout, command, *args = ARGV
require library
$stdout.sync = true

client = Distlock::Client.new(url: url, prefix: 'test', scripts_dir: scripts,
                              timeout: Float(timeout), connect_timeout: Float(connect_timeout))
mono = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC, :float_millisecond) }

# Acquire NAME with WAIT_MS (nil: 0); say "OUTCOME MS": acquired, not-acquired or
# error:CLASS, and how long the call took.
timed_acquire = lambda do |name, wait_ms|
  began = mono.call
  outcome = begin
    client.acquire(name, ttl_ms: 10_000, wait_ms: wait_ms) ? 'acquired' : 'not-acquired'
  rescue StandardError => e
    "error:#{e.class.name.split('::').last}"
  end
  format('%s %.0f', outcome, mono.call - began)
end

warm_up = lambda do # the connections open, the scripts loaded
  held = client.acquire('warm-up', ttl_ms: 5000, wait_ms: 0) or raise 'warm-up held'
  client.release('warm-up', held.token)
end

case command
when 'paused' # NAME WAIT_MS: on "go", time one acquire
  name, wait_ms = args
  warm_up.call
  puts 'ready'
  $stdin.gets
  puts timed_acquire.call(name, Integer(wait_ms))
when 'release' # NAME: hold it; on "go", time its release
  name, = args
  warm_up.call # release.lua loaded: MONITOR sees one EVALSHA per release sent
  held = client.acquire(name, ttl_ms: 60_000, wait_ms: 0) or raise "#{name} held"
  puts "held #{held.token}"
  $stdin.gets
  began = mono.call
  outcome = begin
    client.release(name, held.token) ? 'released' : 'not-owned'
  rescue StandardError => e
    "error:#{e.class.name.split('::').last}"
  end
  puts format('%s %.0f', outcome, mono.call - began)
when 'lategrant' # NAME: on "go", one acquire (wait 0); on "next", three more, each checked
  name, = args
  warm_up.call
  puts 'ready'
  $stdin.gets
  puts timed_acquire.call(name, 0)
  $stdin.gets
  3.times do
    held = begin
      client.acquire(name, ttl_ms: 3000, wait_ms: 0)
    rescue StandardError => e
      puts "error:#{e.class.name.split('::').last}"
      next
    end
    puts held ? "believed #{held.token}" : 'not-acquired'
    $stdin.gets # the test has looked at the server's holder
    client.release(name, held.token) if held
  end
  puts 'done'
end
client.close

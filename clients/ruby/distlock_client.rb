# frozen_string_literal: true
#
# A Ruby client for distlock's Redis lock protocol (version 2), written from
# docs/protocol.md and the headers of the .lua scripts only.
#
# Exclusive and shared locks on one Redis server (or a Cluster, via redis-rb's
# cluster mode: every key of one call shares the {bNNNN} hash tag).

require 'redis'
require 'digest/sha1'
require 'zlib'
require 'json'
require 'securerandom'
require 'socket'

module Distlock
  VERSION = '0.1.0'
  LAYOUT_VERSION = 2

  GRACE_MS = 250          # how long a waiter handed the lock has to claim it
  PATIENCE_MARGIN_MS = 1000
  MAX_BLOCK_MS = 1000     # the longest single BLPOP
  BUCKETS = 1024

  class Error < StandardError; end
  class InvalidName < Error; end

  # ------------------------------------------------------------------ scripts

  # least_argv: the fewest ARGV a call sends, those before the run of optional ones that ends
  # the file's header (protocol.md, Compatibility); older files mark none optional.
  Script = Struct.new(:name, :text, :sha, :least_argv) do
    # FULL, a call's ARGV in their long form, less the last ones the file marks optional
    # (its default is what they say): older files get them all.
    def argv(full) = full.first(least_argv)
  end

  # Loads NAME.lua from a folder, expanding `-- #include "part.lua"` lines.
  class Scripts
    # protocol.md: ^[ \t]*-- #include "([\w/]+\.lua)"[ \t]*$ (multi-line).
    # Ruby's ^ and $ are always line anchors; \w is ASCII here (as it must be
    # for a path), so the class is spelled out.
    INCLUDE_RE = /^[ \t]*-- #include "([A-Za-z0-9_\/]+\.lua)"[ \t]*$/.freeze

    def initialize(dir)
      @dir = File.expand_path(dir)
      @cache = {}
    end

    def [](name)
      @cache[name] ||= begin
        file = File.join(@dir, "#{name}.lua")
        text = expand(file, [])
        Script.new(name, text, Digest::SHA1.hexdigest(text.b), least_argv(File.read(file)))
      end
    end

    private

    # A header's ARGV line; "optional" first in what it says marks one a call may leave out.
    ARGV_RE = /^-- ARGV\[(\d+)\]\s+\w+\s+(optional)?/.freeze

    def least_argv(header)
      optional = header.scan(ARGV_RE).map { |_, mark| !mark.nil? }
      optional.pop while optional.last
      optional.size
    end

    def expand(path, stack)
      real = File.expand_path(path)
      raise Error, "#include cycle: #{(stack + [real]).join(' -> ')}" if stack.include?(real)

      text = File.binread(real).force_encoding(Encoding::UTF_8)
      folder = File.dirname(real)
      text.gsub(INCLUDE_RE) do
        part = expand(File.join(folder, Regexp.last_match(1)), stack + [real])
        part.sub(/\n+\z/, '')
      end
    end
  end

  # --------------------------------------------------------------------- keys

  SAFE_BYTES = ('A'..'Z').to_a + ('a'..'z').to_a + ('0'..'9').to_a + '-._~:/@+=,'.chars
  SAFE_SET = SAFE_BYTES.map(&:ord).to_h { |b| [b, true] }.freeze

  def self.validate_name!(name)
    raise InvalidName, 'a lock name must be a string' unless name.is_a?(String)

    name = name.encode(Encoding::UTF_8) unless name.encoding == Encoding::UTF_8
    raise InvalidName, 'the name is not valid UTF-8' unless name.valid_encoding?

    n = name.length
    raise InvalidName, "a name has 1 to 1024 characters (this one has #{n})" if n < 1 || n > 1024
    if name.match?(/[\p{Cc}\p{Cs}\u2028\u2029]/)
      raise InvalidName, 'a name may not contain control characters'
    end

    name
  end

  # protocol.md, "Keys": no braces, wildcards, control characters or white space (Python's
  # str.isspace(), spelled out: Ruby's \s is ASCII only).
  PREFIX_FORBIDDEN = /[{}*?\[\]\u0000-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/.freeze
  MAX_LEASE_MS = 315_360_000_000 # 10 years: every lease ends

  def self.validate_prefix!(prefix)
    unless prefix.is_a?(String) && !prefix.empty? && !prefix.match?(PREFIX_FORBIDDEN)
      raise ArgumentError, "a KEY_PREFIX has no braces, wildcards, spaces or control characters: #{prefix.inspect}"
    end

    prefix
  end

  # A lease in whole ms, 1 to MAX_LEASE_MS; 1 and 2 are refused too: every grant of a lease
  # that short is inside the drift allowance (1% + 2 ms), so it is never held.
  def self.validate_lease!(ttl_ms)
    ttl = Integer(ttl_ms)
    raise ArgumentError, 'ttl_ms must be positive' if ttl <= 0
    raise ArgumentError, "ttl_ms #{ttl} is too short to be held" if ttl <= ttl * 0.01 + 2
    raise ArgumentError, "ttl_ms #{ttl} is above 10 years" if ttl > MAX_LEASE_MS

    ttl
  end

  # A token presented to release or extend. An empty one would be an operator's force
  # release in release.lua (ARGV[1] = ''), so it is refused here.
  def self.validate_token!(token)
    unless token.is_a?(String) && !token.empty? && !token.include?(' ') && !token.start_with?('=')
      raise ArgumentError, "not a lock token: #{token.inspect}"
    end

    token
  end

  def self.encode_name(name)
    name.b.bytes.map { |b| SAFE_SET[b] ? b.chr : format('%%%02X', b) }.join
  end

  def self.bucket(name)
    Zlib.crc32(name.b) % BUCKETS
  end

  # The keys of one lock name.
  class Keys
    attr_reader :name, :tag, :lock, :fence, :wait, :live, :held, :shheld, :readers, :rmeta

    def initialize(prefix, name)
      @name = Distlock.validate_name!(name)
      @tag = format('%s:{b%04d}', prefix, Distlock.bucket(@name))
      enc = Distlock.encode_name(@name)
      @lock = "#{@tag}:lock:#{enc}"
      @fence = "#{@tag}:fence"
      @wait = "#{@tag}:wait:#{enc}"
      @live = "#{@tag}:live:#{enc}"
      @held = "#{@tag}:held"
      @shheld = "#{@tag}:shheld"
      @readers = "#{@wait}|readers"
      @rmeta = "#{@wait}|rmeta"
    end

    def wakeup(token)
      "#{@wait}:#{token}"
    end

    def acquire_keys = [lock, fence, wait, live, held]
    def release_keys = [lock, wait, live, held]
    def leave_keys = [lock, wait, live]
    def extend_keys = [lock, held]
    def inspect_keys = [lock, live]
    def shared_acquire_keys = [lock, fence, wait, live, shheld, readers, rmeta]
    def shared_release_keys = [lock, wait, live, shheld, readers, rmeta]
    def shared_extend_keys = [lock, shheld, readers, rmeta]
    def shared_inspect_keys = [lock, readers, rmeta, live]
  end

  # ------------------------------------------------------------------- client

  SCRIPT_NAMES = %w[acquire release extend leave_queue inspect shared_acquire shared_release
                    shared_extend shared_leave shared_inspect].freeze

  # Ends a BLPOP on time (protocol.md, "Ending a BLPOP on time"): the server ends a blocked
  # command's timeout on its hz timer (up to 100 ms late at hz 10), and also whenever it wakes
  # for a command, from any connection. redis-rb holds the blocked connection until both
  # replies are in, so a thread sends the command on the client's other connection to the same
  # server: EXISTS of the wake-up list (routed by its key, it reaches the blocking node of a
  # Cluster) SLACK_MS after the block, then after 2, 4, 8, 8... ms until stopped.
  class OnTime
    SLACK_MS = 1
    LONGEST_PAUSE_MS = 8

    def initialize(redis, key, block_ms)
      @mutex = Mutex.new
      @stopped = ConditionVariable.new
      @done = false
      @thread = Thread.new { nudge(redis, key, block_ms + SLACK_MS) }
    end

    # Stops the nudges; returns once none is in flight.
    def stop
      @mutex.synchronize do
        @done = true
        @stopped.signal
      end
      @thread.join
    end

    private

    def nudge(redis, key, pause_ms)
      @mutex.synchronize do
        until pause(pause_ms)
          begin
            redis.exists(key)
          rescue StandardError
            nil # the pipeline's own error is the one the acquire reports
          end
          pause_ms = pause_ms > LONGEST_PAUSE_MS ? 2 : [pause_ms * 2, LONGEST_PAUSE_MS].min
        end
      end
    end

    # Waits pause_ms unless stopped first; returns whether it was stopped.
    def pause(pause_ms)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + pause_ms / 1000.0
      until @done
        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        return false if left <= 0

        @stopped.wait(@mutex, left)
      end
      true
    end
  end

  Acquired = Struct.new(:name, :token, :fence, :acquired_ms, :shared, keyword_init: true)

  class Client
    attr_reader :prefix, :scripts

    # timeout: the read timeout R, connect_timeout: the connect timeout C, seconds.
    def initialize(url: 'redis://127.0.0.1:6379/0', prefix: 'distlock', scripts_dir:,
                   cluster: false, default_purpose: nil, logger: nil, timeout: 5.0,
                   connect_timeout: 5.0)
      @prefix = Distlock.validate_prefix!(prefix)
      @timeout = Float(timeout)
      @connect_timeout = Float(connect_timeout)
      # protocol.md, "BLPOP and the read timeout": MAX_BLOCK <= R / 2.
      @max_block_ms = [MAX_BLOCK_MS, @timeout * 1000 / 2].min
      @scripts = Scripts.new(scripts_dir)
      @cluster = cluster
      @url = url
      @redis = connect
      @waiter = connect # a connection of its own for BLPOP pipelines
      @host = Socket.gethostname
      @default_purpose = default_purpose || [File.basename($PROGRAM_NAME), *ARGV].join(' ')[0, 200]
      @log = logger
      # Expand every script now, so the first acquire does not pay for reading files.
      SCRIPT_NAMES.each { |n| @scripts[n] }
    end

    def inspect = "#<Distlock::Client #{@url} prefix=#{@prefix}>"

    def keys(name) = Keys.new(@prefix, name)

    def metadata(purpose)
      purpose = @default_purpose if purpose.nil?
      JSON.generate({ 'host' => @host, 'pid' => Process.pid, 'thread' => 'main',
                      'purpose' => purpose.to_s[0, 200] })
    end

    # Returns an Acquired, or nil when wait_ms passed first.
    # wait_ms: nil = wait until acquired, 0 = try once.
    def acquire(name, ttl_ms:, wait_ms: nil, shared: false, purpose: nil)
      k = keys(name)
      ttl = Distlock.validate_lease!(ttl_ms)
      wait = wait_ms.nil? ? nil : Integer(wait_ms)
      raise ArgumentError, 'wait_ms must not be negative' if wait && wait.negative?

      token = new_token(shared)
      meta = metadata(purpose)
      script = @scripts[shared ? 'shared_acquire' : 'acquire']
      kl = shared ? k.shared_acquire_keys : k.acquire_keys
      deadline = wait.nil? ? nil : mono_ms + wait
      left = -> { deadline.nil? ? Float::INFINITY : deadline - mono_ms }
      # Current files of acquire.lua tell by themselves whether the token waited, and default
      # the grace: the two go out only to older files (shared_acquire.lua is told).
      args = lambda do |patience, waited|
        sent = [token, ttl.to_s, meta, k.name, patience.to_s, waited]
        shared ? sent : script.argv(sent << GRACE_MS.to_s)
      end

      queued = false
      clock = nil # [sent, server ms] of the first held reply of this acquire: relates the clocks
      begin
        sent = mono_ms
        reply = run(@redis, script, kl, args.call(wait == 0 ? 0 : patience_for(left.call), '0'))
        loop do
          if reply.is_a?(String)
            fence, acquired_ms = reply.split(' ')
            return Acquired.new(name: k.name, token: token, fence: fence,
                                acquired_ms: acquired_ms, shared: shared) if fresh?(ttl, sent, acquired_ms, clock)

            # A grant with less lease left than the drift allowance is no hold:
            # give it back and go on waiting (protocol.md, Waiting, step 4).
            log("grant to #{token} came too late; giving it back")
            release_token(k, token, shared)
            l = left.call
            return nil if l <= 0

            queued = true
            sent = mono_ms
            reply = run(@redis, script, kl, args.call(patience_for(l), '1'))
            next
          end

          _zero, pttl, place, server_ms = reply
          clock ||= [sent, server_ms.to_i] if server_ms
          queued ||= place.to_i >= 0
          l = left.call
          if wait == 0 || l <= 0
            leave(k, token, shared) if queued
            return nil
          end

          timeout = [l, @max_block_ms].min
          timeout = [timeout, pttl.to_i + 2].min if pttl.to_i.positive?
          timeout = [timeout, GRACE_MS].min if place.to_i == 1
          timeout = [timeout.ceil, 1].max
          sent = mono_ms
          reply = blocked_acquire(k.wakeup(token), timeout, script, kl,
                                  args.call(patience_for(l), '1'))
        end
      rescue StandardError => e
        # The server may have granted the lock before the reply was lost.
        begin
          release_token(k, token, shared)
          leave(k, token, shared)
        rescue StandardError => e2
          log("cleanup after #{e.class} failed: #{e2.message}")
        end
        raise
      end
    end

    # true: released; false: the token does not hold the lock any more.
    def release(name, token, shared: false)
      k = keys(name)
      release_token(k, check_token!(token), shared) == 1
    end

    # true: extended; false: not held by the token.
    def extend(name, token, ttl_ms:, shared: false)
      k = keys(name)
      ttl = Distlock.validate_lease!(ttl_ms)

      args = [check_token!(token), ttl.to_s, k.name, '0', '0', '']
      r = if shared
            run(@redis, @scripts['shared_extend'], k.shared_extend_keys, args)
          else
            run(@redis, @scripts['extend'], k.extend_keys, args)
          end
      r.to_i == 1
    end

    # nil, or a hash: token, fence, acquired_ms, renewals, depth, metadata (parsed), shared,
    # remaining_ms.
    def holder(name)
      k = keys(name)
      r = run(@redis, @scripts['inspect'], k.inspect_keys, [])
      return nil if r.nil? || r.empty?

      if r == ['~']
        s = run(@redis, @scripts['shared_inspect'], k.shared_inspect_keys, [])
        return nil if s.nil? || s.empty?

        server_ms = s[0].to_i
        tok, fields, lease_end = s[2], s[3], s[4]
        fence, acquired, renewals, depth, meta = fields.split(' ', 5)
        return holder_hash(tok, fence, acquired, renewals, depth, meta, true,
                           lease_end.to_i - server_ms, s[1])
      end

      value, remaining = r[0], r[1]
      tok, fence, acquired, renewals, depth, meta = value.split(' ', 6)
      holder_hash(tok, fence, acquired, renewals, depth, meta, false, remaining.to_i, r[3])
    end

    def close
      @redis&.close
      @waiter&.close
    end

    private

    # reconnect_attempts: 0: redis-rb's default (1) sends a call again on a new connection
    # when its reply timed out or its connection failed, so a timed-out release ran twice
    # (protocol.md, "The error path": one attempt per call, bounded by C and R). A call on a
    # connection that failed opens a new one: that is the next call, not a retry.
    def connect
      options = { timeout: @timeout, connect_timeout: @connect_timeout, reconnect_attempts: 0 }
      if @cluster
        Redis.new(cluster: [@url], **options)
      else
        Redis.new(url: @url, **options)
      end
    end

    def holder_hash(tok, fence, acquired, renewals, depth, meta, shared, remaining, waiters)
      md = begin
        JSON.parse(meta.to_s)
      rescue JSON::ParserError
        {}
      end
      md = {} unless md.is_a?(Hash)
      { 'token' => tok, 'fence' => fence, 'acquired_ms' => acquired, 'renewals' => renewals.to_i,
        'depth' => depth.to_i, 'metadata' => md, 'host' => md['host'], 'pid' => md['pid'],
        'purpose' => md['purpose'], 'thread' => md['thread'], 'shared' => shared,
        'remaining_ms' => remaining, 'waiters' => waiters }
    end

    def check_token!(token) = Distlock.validate_token!(token)

    def new_token(shared)
      hex = SecureRandom.hex(16)
      shared ? "~#{hex}" : hex
    end

    def mono_ms
      Process.clock_gettime(Process::CLOCK_MONOTONIC, :float_millisecond)
    end

    # patience = min(time left to wait, max block) + margin, in whole ms.
    def patience_for(left)
      return 0 if left <= 0

      ([left, @max_block_ms].min + PATIENCE_MARGIN_MS).ceil
    end

    # The drift allowance (protocol.md): a grant with less than 1% of the lease + 2 ms left
    # (by our clock, from when we sent the call, or from when the server says the hold began,
    # whichever is later) is no hold. The server's time since the clock pair counts at 0.99 on
    # our clock, which may run 1% slower than the server's. A start projected later than now
    # (the reply is here) means the server's clock, a wall clock, stepped forward during the
    # wait (NTP, a VM's clock set after a pause): the hold counts from when we sent the call.
    def fresh?(ttl, sent, acquired_ms, clock)
      now = mono_ms
      start = sent
      if clock && acquired_ms
        began = clock[0] + (acquired_ms.to_i - clock[1]) * 0.99 - 1
        start = began if began > start && began <= now
      end
      now + ttl * 0.01 + 2 < start + ttl
    end

    def release_token(k, token, shared)
      if shared
        run(@redis, @scripts['shared_release'], k.shared_release_keys,
            [token.to_s, k.name, '1', GRACE_MS.to_s]).to_i
      else
        script = @scripts['release']
        run(@redis, script, k.release_keys, script.argv([token.to_s, k.name, '1', GRACE_MS.to_s])).to_i
      end
    end

    def leave(k, token, shared)
      if shared
        run(@redis, @scripts['shared_leave'], k.shared_release_keys,
            [token, GRACE_MS.to_s, k.name])
      else
        script = @scripts['leave_queue']
        run(@redis, script, k.leave_keys, script.argv([token, GRACE_MS.to_s]))
      end
    end

    # EVALSHA, and EVAL when the server does not know the script. A call whose reply timed
    # out, or whose connection failed, drops the connection (protocol.md, "The error path"):
    # its late reply is never read as another call's (redis-rb closes it too).
    def run(conn, script, keys, argv)
      begin
        conn.evalsha(script.sha, keys: keys, argv: argv)
      rescue Redis::CommandError => e
        raise unless e.message.start_with?('NOSCRIPT')

        conn.eval(script.text, keys: keys, argv: argv)
      end
    rescue Redis::BaseConnectionError
      conn.close
      raise
    end

    # BLPOP on the token's wake-up list with acquire pipelined behind it, on a connection
    # of its own. The EVALSHA's reply is the outcome.
    def blocked_acquire(list, timeout_ms, script, keys, argv)
      @waiter ||= connect
      secs = format('%.3f', timeout_ms / 1000.0)
      on_time = OnTime.new(@redis, list, timeout_ms)
      begin
        res = @waiter.pipelined do |p|
          p.call('BLPOP', list, secs)
          p.call('EVALSHA', script.sha, keys.size.to_s, *keys, *argv)
        end
        res[1]
      rescue Redis::CommandError => e
        raise unless e.message.start_with?('NOSCRIPT')

        on_time.stop
        run(@waiter, script, keys, argv)
      rescue StandardError
        # The pending EVALSHA may still run: drop the connection before the error path gives
        # back (protocol.md, "The error path"), so nothing of this wait runs after it.
        @waiter.close
        @waiter = nil
        raise
      ensure
        on_time.stop
      end
    end

    def log(msg)
      @log&.call(msg)
    end
  end
end

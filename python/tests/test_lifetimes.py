"""Objects keep their runtime alive (issue 43), as CuPy arrays keep their context: no object
becomes unusable because a *different* Python object was collected. Each case runs in a
fresh interpreter, so no other test's runtime reference can keep the runtime up."""

from conftest import run_script


def check(code):
    out = run_script(code)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip().endswith("ok"), out.stdout.decode()


def test_a_device_of_a_temporary_runtime_works():
    check(
        """
        import gc, offload
        dev = offload.Offload().device("host")
        gc.collect()
        buf = dev.alloc(16)
        buf.write(bytes(range(16)))
        assert bytes(buf.read()) == bytes(range(16))
        q = dev.queue()
        q.sync()
        print("ok")
        """
    )


def test_del_rt_leaves_buffers_queues_kernels_and_events_working():
    check(
        """
        import gc, offload
        rt = offload.Offload()
        dev = rt.device("host")
        buf = dev.alloc(64)
        q = dev.queue()
        k = offload.Program.from_source(SAXPY_C, "c").load(dev).kernel("noop")
        ev = q.record()
        del rt, dev
        gc.collect()
        buf.write(b"x" * 64)
        assert bytes(buf.read()) == b"x" * 64
        q.launch(k, 1)
        ev.sync()
        q.sync()
        print("ok")
        """
    )


def test_the_last_object_collected_ends_the_runtime():
    check(
        """
        import gc, offload
        rt = offload.Offload()
        buf = rt.device("host").alloc(8)
        generation = rt.generation
        del rt
        gc.collect()
        buf.write(b"12345678")
        del buf
        gc.collect()
        # No reference was left: the next Offload() is a new generation.
        assert offload.Offload().generation > generation
        print("ok")
        """
    )


def test_an_explicit_shutdown_ends_the_hold_of_everything_made_from_it():
    check(
        """
        import offload
        rt = offload.Offload()
        dev = rt.device("host")
        buf = dev.alloc(8)
        assert rt.shutdown() is True   # the last reference: the runtime ends
        # The message is in Python's words: the call as Python names it, Python's fix.
        try:
            buf.read()
        except offload.ShutDownError as e:
            text = str(e)
            assert text.startswith("Buffer.read: "), text
            assert "a new offload.Offload()" in text and "::" not in text, text
        for call in (lambda: buf.read(), lambda: dev.alloc(8), lambda: dev.queue()):
            try:
                call()
            except offload.ShutDownError:
                pass
            else:
                raise AssertionError("a handle outlived an explicit shutdown")
        # With another Offload alive, a shutdown gives back only its own hold.
        keep = offload.Offload()
        rt = offload.Offload()
        buf = rt.device("host").alloc(8)
        assert rt.shutdown() is False
        buf.write(b"abcdefgh")
        assert bytes(buf.read()) == b"abcdefgh"
        keep.shutdown()
        print("ok")
        """
    )

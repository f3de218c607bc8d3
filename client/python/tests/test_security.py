"""Bearer tokens, tenants, roles and TLS against the real opjournal binary."""

import hashlib
import os
import secrets
import shutil
import subprocess
import unittest

from _harness import Server, make_token, new_key, tmpdir

import opjournal

PAYLOAD = {"order_id": "817", "amount_minor": 490000, "currency": "RUB"}
server = None
tokens = {}


def _entry(name, token, tenant, roles):
    return "  - name: %s\n    sha256: %s\n    tenant: %s\n    roles: [%s]\n" % (
        name, hashlib.sha256(token.encode()).hexdigest(), tenant, roles)


def setUpModule():
    global server
    # One token made by `opjournal token`, the others by their digest here.
    agent_x, entry = make_token("agent-x", "x", "agent")
    agent_y = "opj_" + secrets.token_urlsafe(32)
    operator_x = "opj_" + secrets.token_urlsafe(32)
    path = os.path.join(tmpdir(), "tokens.yaml")
    with open(path, "w") as f:
        f.write("tokens:\n" + entry + _entry("agent-y", agent_y, "y", "agent")
                + _entry("operator-x", operator_x, "x", "operator"))
    tokens.update(agent_x=agent_x, agent_y=agent_y, operator_x=operator_x)
    server = Server("--auth-file", path)


def tearDownModule():
    server.stop()


class AuthTest(unittest.TestCase):
    def test_the_token_is_sent_on_every_call(self):
        key = new_key()
        with server.journal(token=tokens["agent_x"]) as j:
            out = opjournal.execute(j, key, "create_payment", PAYLOAD, lambda k, a: opjournal.Effect("pay_1"))
            self.assertTrue(out.ok)  # register+claim, then mark_succeeded
            self.assertEqual(j.lookup(key).status, "succeeded")
            self.assertTrue(opjournal.execute(j, key, "create_payment", PAYLOAD,
                                              lambda k, a: self.fail("fn called")).replayed)
        self.assertNotIn(tokens["agent_x"], repr(j))

    def test_missing_token_is_unauthenticated(self):
        with server.journal() as j:
            with self.assertRaises(opjournal.Unauthenticated) as cm:
                j.register(new_key(), "create_payment", PAYLOAD)
        self.assertEqual(cm.exception.code, "UNAUTHENTICATED")

    def test_wrong_token_is_unauthenticated(self):
        with server.journal(token="opj_" + secrets.token_urlsafe(32)) as j:
            with self.assertRaises(opjournal.Unauthenticated):
                j.lookup(new_key())
            with self.assertRaises(opjournal.Unauthenticated):
                opjournal.execute(j, new_key(), "create_payment", PAYLOAD, lambda k, a: self.fail("fn called"))

    def test_a_role_without_the_rpc_is_permission_denied(self):
        with server.journal(token=tokens["operator_x"]) as j:
            with self.assertRaises(opjournal.PermissionDenied) as cm:
                j.register(new_key(), "create_payment", PAYLOAD)
        self.assertEqual(cm.exception.code, "PERMISSION_DENIED")

    def test_tenants_do_not_see_each_other(self):
        key = new_key()
        with server.journal(token=tokens["agent_x"]) as jx, server.journal(token=tokens["agent_y"]) as jy:
            jx.register(key, "create_payment", PAYLOAD)
            with self.assertRaises(opjournal.NotFound):
                jy.lookup(key)
            # The same key in tenant y is another operation, even with other parameters.
            self.assertTrue(jy.register(key, "create_payment", dict(PAYLOAD, amount_minor=1)).created)


def _self_signed_cert(d):
    key, cert = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl command to make a certificate")
class TLSTest(unittest.TestCase):
    def test_tls_with_a_ca_file(self):
        cert, key = _self_signed_cert(tmpdir())
        srv = Server("--tls-cert", cert, "--tls-key", key)
        self.addCleanup(srv.stop)
        self.assertTrue(srv.info.get("tls"))
        with srv.journal(tls_ca=cert) as j:
            reg = j.register(new_key(), "create_payment", PAYLOAD, claim=True)
            self.assertTrue(reg.claimed)
        with open(cert, "rb") as f:
            with srv.journal(tls_ca=f.read()) as j:  # the PEM bytes work too
                j.register(new_key(), "create_payment", PAYLOAD)
        # A plaintext client cannot talk to a TLS listener.
        with srv.journal(timeout=2) as j:
            with self.assertRaises(opjournal.Unavailable):
                j.lookup(new_key())


if __name__ == "__main__":
    unittest.main()

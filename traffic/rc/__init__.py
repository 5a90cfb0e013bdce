"""RoCEv2 Reliable Connection transport (book ch.9, ch.12): one QP's two halves
(`endpoint.RcEndpoint`), its knobs (`rcconfig`), messages into packets (`segment`), the
sending side (`requester`) and the receiving side (`responder`). Pure: no I/O."""

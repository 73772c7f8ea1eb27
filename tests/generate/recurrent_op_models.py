"""Fixtures of RNN, GRU and LSTM for what ONNX's own node tests leave out: both directions,
sequence_lens shorter than X (zeros past them in Y, the last state in Y_h/Y_c), initial
states, peepholes, input_forget, clip, linear_before_reset and activation functions with alpha
and beta (onnxruntime refuses layout 1: ONNX's batchwise node tests cover it). Registered into op_models.FIXTURES on import."""

import numpy as np

from op_models import F32, Spec, fixture, node, randn

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent(op, seq, batch, inputs, hidden, direction="forward", lens=None, initial=False,
              peepholes=False, layout=0, outputs=("y", "y_h"), **attrs):
    """X is a graph input (with sequence_lens when `lens` is given); weights are initializers
    drawn with a 1/sqrt(fan-in) spread so the gates stay away from saturation."""

    def make(rng):
        dirs = 2 if direction == "bidirectional" else 1
        g = GATES[op]
        x_shape = (batch, seq, inputs) if layout else (seq, batch, inputs)
        state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
        feeds = {"x": randn(rng, *x_shape)}
        inits = {
            "w": randn(rng, dirs, g * hidden, inputs, scale=1 / np.sqrt(inputs)),
            "r": randn(rng, dirs, g * hidden, hidden, scale=1 / np.sqrt(hidden)),
            "b": randn(rng, dirs, 2 * g * hidden, scale=0.3),
        }
        ins = ["x", "w", "r", "b"]
        if lens is not None:
            feeds["lens"] = np.array(lens, np.int32)
            ins.append("lens")
        else:
            ins.append("")
        if initial:
            inits["h0"] = randn(rng, *state_shape, scale=0.5)
            ins.append("h0")
            if op == "LSTM":
                inits["c0"] = randn(rng, *state_shape, scale=0.5)
                ins.append("c0")
        if peepholes:
            if not initial:
                ins += ["", ""]
            inits["p"] = randn(rng, dirs, 3 * hidden, scale=0.3)
            ins.append("p")
        while ins[-1] == "":
            ins.pop()
        if layout:
            attrs["layout"] = 1
        n = node(op, ins, list(outputs), hidden_size=hidden, direction=direction, **attrs)
        return Spec(n, feeds, inits, outputs=[o for o in outputs if o], opset=14)

    return make


fixture("op_lstm_bidirectional_seq_lens")(
    recurrent("LSTM", 5, 3, 4, 6, "bidirectional", lens=[5, 2, 4], initial=True, peepholes=True,
              outputs=("y", "y_h", "y_c")))
fixture("op_lstm_reverse_input_forget_clip")(
    recurrent("LSTM", 4, 2, 3, 5, "reverse", lens=[3, 4], input_forget=1, clip=0.8,
              outputs=("y", "y_h", "y_c")))
fixture("op_lstm_bidirectional_activations")(
    recurrent("LSTM", 3, 2, 4, 4, "bidirectional", initial=True,
              activations=["HardSigmoid", "Softsign", "ScaledTanh"] * 2,
              activation_alpha=[0.3, 0.9, 0.25], activation_beta=[0.4, 1.1, 0.45],
              outputs=("y", "y_h", "y_c")))
fixture("op_gru_linear_before_reset_reverse")(
    recurrent("GRU", 5, 3, 4, 6, "reverse", lens=[4, 5, 1], initial=True, linear_before_reset=1))
fixture("op_gru_bidirectional_activations")(
    recurrent("GRU", 4, 2, 3, 5, "bidirectional", lens=[2, 4],
              activations=["Sigmoid", "Elu", "HardSigmoid", "Tanh"],
              activation_alpha=[0.7, 0.15], activation_beta=[0.55], clip=2.0))
fixture("op_gru_y_h_only")(
    recurrent("GRU", 3, 4, 5, 3, initial=True, outputs=("", "y_h")))
fixture("op_rnn_bidirectional_seq_lens")(
    recurrent("RNN", 6, 3, 4, 5, "bidirectional", lens=[6, 3, 1], initial=True,
              activations=["LeakyRelu", "Affine"], activation_alpha=[0.2, 0.6],
              activation_beta=[0.1]))
fixture("op_rnn_softplus_clip")(
    recurrent("RNN", 4, 2, 3, 4, activations=["Softplus"], clip=1.2, outputs=("y",)))

"""Laws outside the catalog, as a lab would declare them: variables in SI units over their
rigs' ranges, noiseless and with noise, each searched by Racing-CVGP with the default settings.
Prints one line per run (law, noise, the law found, exact or not, test NMSE, CPU, points) and a
count per noise level.

Noise follows SRBench: Gaussian, standard deviation ``level`` x std(y) over the variables'
ranges (estimated once per law from 100,000 uniform points); with ``--relative``, ``level`` of
each reading instead (an instrument's "1% of reading"). With ``--digits N`` each reading is
then rounded to N significant digits, as a meter that shows N digits would; with ``--wild F``
a fraction F of readings is wild (times a uniform draw from 0 to 3: a loose contact).

    python benchmarks/rigs_bench.py --noise 0,0.01 --seeds 1 --jobs 2
    python benchmarks/rigs_bench.py --noise 0.01 --relative --jobs 2
    python benchmarks/rigs_bench.py --noise 0 --digits 4 --jobs 2
    python benchmarks/rigs_bench.py --noise 0.001 --wild 0.002 --jobs 2
    python benchmarks/rigs_bench.py --held-out --noise 0,0.01 --jobs 2

``--held-out`` runs the laws of ``HELD_OUT`` instead, which no change was tuned on.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from rcvgp import CallableOracle, OracleSpec, Output, SearchConfig, Variable, run_search
from rcvgp.bench import environment
from rcvgp.metrics import is_exact

V = Variable

#: name: (the law as text, its variables, the law as a function of their columns)
LAWS: dict[str, tuple[str, tuple[Variable, ...], Callable[..., np.ndarray]]] = {
    "ideal gas": ("8.314*n*T/V", (V("n", 0.1, 10.0, unit="mol"), V("T", 200.0, 400.0, unit="K"),
                                  V("V", 1e-3, 1e-1, unit="m^3")),
                  lambda n, T, Vol: 8.314 * n * T / Vol),
    "Coulomb": ("8.99e9*q1*q2/r**2", (V("q1", 1e-9, 1e-6, unit="C"), V("q2", 1e-9, 1e-6, unit="C"),
                                      V("r", 0.01, 1.0, unit="m")),
                lambda q1, q2, r: 8.99e9 * q1 * q2 / r**2),
    "RC discharge": ("V0*exp(-t/(R*C))", (V("V0", 1.0, 10.0, unit="V"), V("t", 0.0, 0.5, unit="s"),
                                          V("R", 1e3, 1e4, unit="ohm"), V("C", 1e-5, 1e-4, unit="F")),
                     lambda V0, t, R, C: V0 * np.exp(-t / (R * C))),
    "damped oscillator": ("A*exp(-b*t)*cos(w*t)", (V("A", 0.5, 2.0, unit="m"), V("b", 0.1, 1.0, unit="1/s"),
                                                   V("w", 1.0, 5.0, unit="rad/s"), V("t", 0.0, 5.0, unit="s")),
                          lambda A, b, w, t: A * np.exp(-b * t) * np.cos(w * t)),
    "energy": ("0.5*m*v**2 + 9.81*m*h", (V("m", 0.1, 10.0, unit="kg"), V("v", 0.0, 10.0, unit="m/s"),
                                         V("h", 0.0, 10.0, unit="m")),
               lambda m, v, h: 0.5 * m * v**2 + 9.81 * m * h),
    "Stefan-Boltzmann": ("5.67e-8*A*T**4", (V("A", 0.01, 1.0, unit="m^2"), V("T", 300.0, 1000.0, unit="K")),
                         lambda A, T: 5.67e-8 * A * T**4),
    "projectile range": ("v**2*sin(2*th)/9.81", (V("v", 1.0, 30.0, unit="m/s"), V("th", 0.1, 1.4, unit="rad")),
                         lambda v, th: v**2 * np.sin(2 * th) / 9.81),
    "thin lens": ("1/(1/f - 1/u)", (V("f", 0.05, 0.2, unit="m"), V("u", 0.3, 2.0, unit="m")),
                  lambda f, u: 1 / (1 / f - 1 / u)),
    # Added on 2026-11-28 (session 8) to look for what the eight above do not show: a variable
    # named S (sympy's singleton to a plain parse), a saturation, a pole, powers, a constant
    # inside a sum.
    "gravity": ("6.674e-11*m1*m2/r**2", (V("m1", 1.0, 1e3, unit="kg"), V("m2", 1.0, 1e3, unit="kg"),
                                         V("r", 0.1, 10.0, unit="m")),
                lambda m1, m2, r: 6.674e-11 * m1 * m2 / r**2),
    "drag": ("0.5*rho*v**2*Cd*A", (V("rho", 1.0, 1.3, unit="kg/m^3"), V("v", 1.0, 50.0, unit="m/s"),
                                   V("Cd", 0.1, 1.5), V("A", 0.01, 1.0, unit="m^2")),
             lambda rho, v, Cd, A: 0.5 * rho * v**2 * Cd * A),
    "Poiseuille": ("pi*r**4*dP/(8*mu*L)", (V("r", 1e-4, 1e-3, unit="m"), V("dP", 1e2, 1e4, unit="Pa"),
                                           V("mu", 1e-3, 1e-2, unit="Pa*s"), V("L", 0.1, 1.0, unit="m")),
                   lambda r, dP, mu, L: np.pi * r**4 * dP / (8 * mu * L)),
    "Doppler": ("f0*(1 + v/343)", (V("f0", 100.0, 1000.0, unit="Hz"), V("v", 0.0, 30.0, unit="m/s")),
                lambda f0, v: f0 * (1 + v / 343)),
    "pendulum period": ("2*pi*sqrt(L/g)", (V("L", 0.1, 2.0, unit="m"), V("g", 1.0, 20.0, unit="m/s^2")),
                        lambda L, g: 2 * np.pi * np.sqrt(L / g)),
    "Joule heating": ("U**2/R", (V("U", 1.0, 240.0, unit="V"), V("R", 1.0, 1e3, unit="ohm")),
                      lambda U, R: U**2 / R),
    "spring energy": ("0.5*k*x**2 + 0.5*m*v**2", (V("k", 10.0, 1e3, unit="N/m"), V("x", -0.1, 0.1, unit="m"),
                                                  V("m", 0.1, 5.0, unit="kg"), V("v", -3.0, 3.0, unit="m/s")),
                      lambda k, x, m, v: 0.5 * k * x**2 + 0.5 * m * v**2),
    "decay": ("N0*exp(-0.693147*t/T)", (V("N0", 1e3, 1e6), V("t", 0.0, 100.0, unit="s"),
                                        V("T", 10.0, 100.0, unit="s")),
              lambda N0, t, T: N0 * np.exp(-0.693147 * t / T)),
    "string wave": ("sqrt(F/mu)", (V("F", 10.0, 100.0, unit="N"), V("mu", 1e-3, 1e-2, unit="kg/m")),
                    lambda F, mu: np.sqrt(F / mu)),
    "Bernoulli": ("p + 0.5*rho*v**2 + 9.81*rho*h", (V("p", 1e5, 2e5, unit="Pa"), V("rho", 800.0, 1200.0, unit="kg/m^3"),
                                                   V("v", 0.0, 5.0, unit="m/s"), V("h", 0.0, 10.0, unit="m")),
                  lambda p, rho, v, h: p + 0.5 * rho * v**2 + 9.81 * rho * h),
    "RC charging": ("V0*(1 - exp(-t/(R*C)))", (V("V0", 1.0, 10.0, unit="V"), V("t", 0.0, 0.5, unit="s"),
                                               V("R", 1e3, 1e4, unit="ohm"), V("C", 1e-5, 1e-4, unit="F")),
                    lambda V0, t, R, C: V0 * (1 - np.exp(-t / (R * C)))),
    "Michaelis-Menten": ("Vm*S/(Km + S)", (V("Vm", 1.0, 10.0, unit="mM/s"), V("S", 0.1, 10.0, unit="mM"),
                                           V("Km", 0.5, 5.0, unit="mM")),
                         lambda Vm, S, Km: Vm * S / (Km + S)),
    "Beer-Lambert": ("I0*exp(-eps*c*l)", (V("I0", 1.0, 100.0), V("eps", 10.0, 100.0, unit="1/(M*cm)"),
                                          V("c", 1e-3, 1e-2, unit="M"), V("l", 0.1, 2.0, unit="cm")),
                     lambda I0, eps, c, l: I0 * np.exp(-eps * c * l)),
    "Kepler": ("2*pi*sqrt(a**3/(6.674e-11*M))", (V("a", 1e10, 1e12, unit="m"), V("M", 1e29, 1e31, unit="kg")),
               lambda a, M: 2 * np.pi * np.sqrt(a**3 / (6.674e-11 * M))),
    "Arrhenius": ("A*exp(-Ea/(8.314*T))", (V("A", 1e3, 1e6, unit="1/s"), V("Ea", 1e4, 5e4, unit="J/mol"),
                                           V("T", 300.0, 1000.0, unit="K")),
                  lambda A, Ea, T: A * np.exp(-Ea / (8.314 * T))),
    "Lorentz factor": ("1/sqrt(1 - v**2/8.98755e16)", (V("v", 1e7, 2.7e8, unit="m/s"),),
                       lambda v: 1 / np.sqrt(1 - v**2 / 8.98755e16)),
    # Added on 2026-11-29 (session 9): one knob, the rest of the rig fixed. A law of one variable
    # has a single round with nothing held.
    "charging (t)": ("5*(1 - exp(-t/0.01))", (V("t", 0.0, 0.05, unit="s"),), lambda t: 5 * (1 - np.exp(-t / 0.01))),
    "radiance (T)": ("5.67e-8*T**4", (V("T", 200.0, 1000.0, unit="K"),), lambda T: 5.67e-8 * T**4),
    "saturation (S)": ("3.2*S/(0.5 + S)", (V("S", 0.01, 5.0, unit="mM"),), lambda S: 3.2 * S / (0.5 + S)),
    "rate (T)": ("1e13*exp(-9000/T)", (V("T", 300.0, 600.0, unit="K"),), lambda T: 1e13 * np.exp(-9000 / T)),
    "image (u)": ("0.1*u/(u - 0.1)", (V("u", 0.15, 2.0, unit="m"),), lambda u: 0.1 * u / (u - 0.1)),
    "absorbance (x)": ("100*exp(-0.3*x)", (V("x", 0.0, 10.0, unit="cm"),), lambda x: 100 * np.exp(-0.3 * x)),
    "Malus (th)": ("800*cos(th)**2", (V("th", 0.0, 1.5, unit="rad"),), lambda th: 800 * np.cos(th) ** 2),
    "mains (t)": ("0.02*sin(314.16*t)", (V("t", 0.0, 0.05, unit="s"),), lambda t: 0.02 * np.sin(314.16 * t)),
    "potential (r)": ("-3.986e14/r", (V("r", 6.4e6, 4e7, unit="m"),), lambda r: -3.986e14 / r),
    "period (L)": ("2.00607*sqrt(L)", (V("L", 0.1, 2.0, unit="m"),), lambda L: 2.00607 * np.sqrt(L)),
    # Added on 2026-11-29 (session 10): laws of other shapes, several of them functions of a
    # piece (a power of its own, a root or an exponential of a sum, a pole of an exponential).
    "distance": ("sqrt(x**2 + y**2)", (V("x", 1.0, 10.0, unit="m"), V("y", 1.0, 10.0, unit="m")),
                 lambda x, y: np.sqrt(x**2 + y**2)),
    "Gaussian (x)": ("2*exp(-(x - 1.5)**2/0.18)", (V("x", 0.0, 3.0, unit="m"),),
                     lambda x: 2 * np.exp(-(x - 1.5) ** 2 / 0.18)),
    "logistic (t)": ("10/(1 + exp(-0.8*(t - 5)))", (V("t", 0.0, 10.0, unit="h"),),
                     lambda t: 10 / (1 + np.exp(-0.8 * (t - 5)))),
    "parallel R": ("R1*R2/(R1 + R2)", (V("R1", 10.0, 1000.0, unit="ohm"), V("R2", 10.0, 1000.0, unit="ohm")),
                   lambda a, b: a * b / (a + b)),
    "van der Waals": ("8.314*T/(V - 3e-5) - 0.14/V**2",
                      (V("T", 250.0, 400.0, unit="K"), V("V", 1e-4, 1e-3, unit="m^3")),
                      lambda T, Vol: 8.314 * T / (Vol - 3e-5) - 0.14 / Vol**2),
    "escape velocity": ("sqrt(2*6.674e-11*M/r)", (V("M", 1e22, 1e25, unit="kg"), V("r", 1e6, 1e7, unit="m")),
                        lambda M, r: np.sqrt(2 * 6.674e-11 * M / r)),
    "centripetal": ("m*v**2/r", (V("m", 0.1, 10.0, unit="kg"), V("v", 1.0, 20.0, unit="m/s"),
                                 V("r", 0.5, 5.0, unit="m")),
                    lambda m, v, r: m * v**2 / r),
    "battery": ("E*R/(R + r)", (V("E", 1.0, 12.0, unit="V"), V("R", 1.0, 100.0, unit="ohm"),
                                V("r", 0.1, 5.0, unit="ohm")),
                lambda E, R, r: E * R / (R + r)),
    "sound speed": ("sqrt(1.4*8.314*T/M)", (V("T", 200.0, 400.0, unit="K"), V("M", 0.002, 0.05, unit="kg/mol")),
                    lambda T, M: np.sqrt(1.4 * 8.314 * T / M)),
    "adiabat (V)": ("0.6309*V**-1.4", (V("V", 1e-4, 1e-2, unit="m^3"),), lambda Vol: 0.6309 * Vol**-1.4),
    "cooling": ("Ta + (T0 - Ta)*exp(-0.01*t)", (V("Ta", 280.0, 300.0, unit="K"), V("T0", 320.0, 370.0, unit="K"),
                                                V("t", 0.0, 300.0, unit="s")),
                lambda Ta, T0, t: Ta + (T0 - Ta) * np.exp(-0.01 * t)),
    "LC frequency": ("1/(2*pi*sqrt(L*C))", (V("L", 1e-6, 1e-3, unit="H"), V("C", 1e-12, 1e-9, unit="F")),
                     lambda L, C: 1 / (2 * np.pi * np.sqrt(L * C))),
    "capacitor energy": ("0.5*C*U**2", (V("C", 1e-6, 1e-3, unit="F"), V("U", 1.0, 100.0, unit="V")),
                         lambda C, U: 0.5 * C * U**2),
    "Planck (nu)": ("1.4745e-50*nu**3/(exp(9.598e-15*nu) - 1)", (V("nu", 1e13, 1e15, unit="Hz"),),
                    lambda nu: 1.4745e-50 * nu**3 / (np.exp(9.598e-15 * nu) - 1)),
    "intensity (r)": ("100/(r + 0.1)**2", (V("r", 0.0, 2.0, unit="m"),), lambda r: 100 / (r + 0.1) ** 2),
    "Kleiber (M)": ("3.4*M**0.75", (V("M", 0.01, 1000.0, unit="kg"),), lambda M: 3.4 * M**0.75),
    "Lorentzian (f)": ("5/(1 + ((f - 100)/2)**2)", (V("f", 90.0, 110.0, unit="Hz"),),
                       lambda f: 5 / (1 + ((f - 100) / 2) ** 2)),
    "Fermi (E)": ("1/(exp((E - 0.5)/0.025) + 1)", (V("E", 0.3, 0.7, unit="eV"),),
                  lambda E: 1 / (np.exp((E - 0.5) / 0.025) + 1)),
    "Shannon": ("B*log(1 + P/1e-3)", (V("B", 1e3, 1e6, unit="Hz"), V("P", 1e-4, 1.0, unit="W")),
                lambda B, P: B * np.log(1 + P / 1e-3)),
    "rocket": ("ve*log(m0/mf)", (V("ve", 1e3, 4e3, unit="m/s"), V("m0", 1e3, 1e4, unit="kg"),
                                 V("mf", 100.0, 900.0, unit="kg")),
               lambda ve, m0, mf: ve * np.log(m0 / mf)),
    "critical damping": ("A*(1 + w*t)*exp(-w*t)", (V("A", 0.5, 2.0, unit="m"), V("w", 0.5, 3.0, unit="1/s"),
                                                   V("t", 0.0, 5.0, unit="s")),
                         lambda A, w, t: A * (1 + w * t) * np.exp(-w * t)),
    "Rydberg": ("1.097e7*(1/n1**2 - 1/n2**2)", (V("n1", 1.0, 3.0), V("n2", 4.0, 8.0)),
                lambda n1, n2: 1.097e7 * (1 / n1**2 - 1 / n2**2)),
    "diode (V)": ("1e-12*(exp(V/0.0257) - 1)", (V("V", 0.0, 0.7, unit="V"),),
                  lambda v: 1e-12 * (np.exp(v / 0.0257) - 1)),
    "Stokes": ("2*(rp - rf)*9.81*r**2/(9*mu)", (V("rp", 2000.0, 8000.0, unit="kg/m^3"),
                                                 V("rf", 800.0, 1200.0, unit="kg/m^3"),
                                                 V("r", 1e-5, 1e-4, unit="m"), V("mu", 1e-3, 1e-1, unit="Pa*s")),
               lambda rp, rf, r, mu: 2 * (rp - rf) * 9.81 * r**2 / (9 * mu)),
    "softened (r)": ("1/(r**2 + 0.01)", (V("r", 0.0, 1.0, unit="m"),), lambda r: 1 / (r**2 + 0.01)),
    "Hill (S)": ("4*S**2.5/(1 + S**2.5)", (V("S", 0.1, 5.0, unit="mM"),), lambda S: 4 * S**2.5 / (1 + S**2.5)),
    "relativistic energy": ("m*8.98755e16/sqrt(1 - v**2/8.98755e16)",
                            (V("m", 1e-27, 1e-26, unit="kg"), V("v", 1e7, 2.5e8, unit="m/s")),
                            lambda m, v: m * 8.98755e16 / np.sqrt(1 - v**2 / 8.98755e16)),
    "Nernst": ("0.0257*log(c1/c2)", (V("c1", 1e-3, 1.0, unit="M"), V("c2", 1e-3, 1.0, unit="M")),
               lambda c1, c2: 0.0257 * np.log(c1 / c2)),
    # Added on 2026-11-29 (session 14) as a held-out set: written and measured before any change
    # to the search that session, to see how the laws above, which steered the search since
    # session 7, generalise. Offsets through zero (Celsius), constants far from 1, five variables.
    "wire field": ("2e-7*I/r", (V("I", 0.1, 10.0, unit="A"), V("r", 1e-3, 0.1, unit="m")),
                   lambda I, r: 2e-7 * I / r),
    "rms speed": ("sqrt(3*1.380649e-23*T/m)", (V("T", 100.0, 1000.0, unit="K"), V("m", 1e-27, 1e-25, unit="kg")),
                  lambda T, m: np.sqrt(3 * 1.380649e-23 * T / m)),
    "series current": ("U/(R1 + R2)", (V("U", 1.0, 24.0, unit="V"), V("R1", 10.0, 1000.0, unit="ohm"),
                                       V("R2", 10.0, 1000.0, unit="ohm")),
                       lambda U, R1, R2: U / (R1 + R2)),
    "plate capacitor": ("8.854e-12*er*A/d", (V("er", 1.0, 10.0), V("A", 1e-4, 1e-2, unit="m^2"),
                                             V("d", 1e-5, 1e-3, unit="m")),
                        lambda er, A, d: 8.854e-12 * er * A / d),
    "torque": ("r*F*sin(th)", (V("r", 0.1, 1.0, unit="m"), V("F", 1.0, 100.0, unit="N"),
                               V("th", 0.0, 3.14, unit="rad")),
               lambda r, F, th: r * F * np.sin(th)),
    "preloaded spring": ("k*(x - x0)", (V("k", 10.0, 1000.0, unit="N/m"), V("x", 0.05, 0.2, unit="m"),
                                        V("x0", 0.01, 0.04, unit="m")),
                         lambda k, x, x0: k * (x - x0)),
    "heat conduction": ("k*A*(T1 - T2)/d", (V("k", 0.1, 400.0, unit="W/(m*K)"), V("A", 0.01, 1.0, unit="m^2"),
                                            V("T1", 330.0, 400.0, unit="K"), V("T2", 280.0, 320.0, unit="K"),
                                            V("d", 0.01, 0.1, unit="m")),
                        lambda k, A, T1, T2, d: k * A * (T1 - T2) / d),
    "photon energy (lam)": ("1.9864e-25/lam", (V("lam", 1e-7, 1e-6, unit="m"),), lambda lam: 1.9864e-25 / lam),
    "de Broglie": ("6.626e-34/(m*v)", (V("m", 1e-31, 1e-27, unit="kg"), V("v", 1e3, 1e6, unit="m/s")),
                   lambda m, v: 6.626e-34 / (m * v)),
    "Child-Langmuir": ("2.33e-6*U**1.5/d**2", (V("U", 10.0, 1000.0, unit="V"), V("d", 1e-3, 1e-2, unit="m")),
                       lambda U, d: 2.33e-6 * U**1.5 / d**2),
    "Hall voltage": ("I*B/(n*1.602e-19*t)", (V("I", 0.01, 1.0, unit="A"), V("B", 0.1, 2.0, unit="T"),
                                              V("n", 1e28, 1e29, unit="1/m^3"), V("t", 1e-4, 1e-3, unit="m")),
                     lambda I, B, n, t: I * B / (n * 1.602e-19 * t)),
    "growth (t)": ("50*exp(0.3*t)", (V("t", 0.0, 10.0, unit="h"),), lambda t: 50 * np.exp(0.3 * t)),
    "depth pressure": ("p0 + 9.81*rho*h", (V("p0", 9e4, 1.1e5, unit="Pa"), V("rho", 700.0, 1300.0, unit="kg/m^3"),
                                            V("h", 0.0, 50.0, unit="m")),
                       lambda p0, rho, h: p0 + 9.81 * rho * h),
    "beam radius": ("w0*sqrt(1 + (z/zr)**2)", (V("w0", 1e-3, 5e-3, unit="m"), V("z", 0.0, 10.0, unit="m"),
                                               V("zr", 1.0, 5.0, unit="m")),
                    lambda w0, z, zr: w0 * np.sqrt(1 + (z / zr) ** 2)),
    "velocity addition": ("(u + v)/(1 + u*v/8.98755e16)", (V("u", 1e7, 2e8, unit="m/s"), V("v", 1e7, 2e8, unit="m/s")),
                          lambda u, v: (u + v) / (1 + u * v / 8.98755e16)),
    "Langmuir": ("qm*K*P/(1 + K*P)", (V("qm", 1.0, 5.0, unit="mmol/g"), V("K", 0.1, 10.0, unit="1/bar"),
                                      V("P", 0.01, 10.0, unit="bar")),
                 lambda qm, K, P: qm * K * P / (1 + K * P)),
    "pendulum energy": ("9.81*m*L*(1 - cos(th))", (V("m", 0.1, 2.0, unit="kg"), V("L", 0.1, 2.0, unit="m"),
                                                    V("th", -1.0, 1.0, unit="rad")),
                        lambda m, L, th: 9.81 * m * L * (1 - np.cos(th))),
    "travelling wave": ("0.01*sin(6.28*x - 31.4*t)", (V("x", 0.0, 1.0, unit="m"), V("t", 0.0, 0.2, unit="s")),
                        lambda x, t: 0.01 * np.sin(6.28 * x - 31.4 * t)),
    "gas in Celsius": ("8.314*n*(Tc + 273.15)/V", (V("n", 0.1, 10.0, unit="mol"), V("Tc", -20.0, 100.0, unit="degC"),
                                                    V("V", 1e-3, 1e-1, unit="m^3")),
                       lambda n, Tc, Vol: 8.314 * n * (Tc + 273.15) / Vol),
    "RTD (Tc)": ("100*(1 + 0.0039*(Tc - 20))", (V("Tc", -50.0, 150.0, unit="degC"),),
                 lambda Tc: 100 * (1 + 0.0039 * (Tc - 20))),
    "Compton (th)": ("2.426e-12*(1 - cos(th))", (V("th", 0.0, 3.14, unit="rad"),),
                     lambda th: 2.426e-12 * (1 - np.cos(th))),
    "Reynolds": ("rho*v*D/mu", (V("rho", 800.0, 1200.0, unit="kg/m^3"), V("v", 0.1, 5.0, unit="m/s"),
                                V("D", 0.01, 0.5, unit="m"), V("mu", 1e-3, 1e-1, unit="Pa*s")),
                 lambda rho, v, D, mu: rho * v * D / mu),
    "AC power": ("U*I*cos(phi)", (V("U", 100.0, 240.0, unit="V"), V("I", 0.1, 10.0, unit="A"),
                                  V("phi", -1.5, 1.5, unit="rad")),
                 lambda U, I, phi: U * I * np.cos(phi)),
    "parallel axis": ("m*(r**2/2 + d**2)", (V("m", 0.1, 10.0, unit="kg"), V("r", 0.01, 0.5, unit="m"),
                                            V("d", 0.0, 1.0, unit="m")),
                      lambda m, r, d: m * (r**2 / 2 + d**2)),
    "sound level (I)": ("4.3429*log(I/1e-12)", (V("I", 1e-10, 1.0, unit="W/m^2"),),
                        lambda I: 4.3429 * np.log(I / 1e-12)),
}


#: Laws no change was tuned on: written on 2026-12-01 (session 28), after the engine, to see
#: whether a change holds beyond the laws above, which earlier sessions looked at run by run.
#: Judge a change on them too; to keep them telling, do not tune to them.
HELD_OUT: dict[str, tuple[str, tuple[Variable, ...], Callable[..., np.ndarray]]] = {
    "spring period": ("2*pi*sqrt(m/k)", (V("m", 0.1, 5.0, unit="kg"), V("k", 10.0, 1e3, unit="N/m")),
                      lambda m, k: 2 * np.pi * np.sqrt(m / k)),
    "Wien": ("2.898e-3/T", (V("T", 300.0, 6000.0, unit="K"),), lambda T: 2.898e-3 / T),
    "loop field": ("6.2832e-7*I*R**2/(R**2 + z**2)**1.5", (V("I", 0.1, 10.0, unit="A"), V("R", 0.01, 0.1, unit="m"),
                   V("z", 0.0, 0.2, unit="m")), lambda I, R, z: 6.2832e-7 * I * R**2 / (R**2 + z**2) ** 1.5),
    "buoyancy": ("9.81*rho*Vol", (V("rho", 800.0, 1200.0, unit="kg/m^3"), V("Vol", 1e-4, 1e-2, unit="m^3")),
                 lambda rho, Vol: 9.81 * rho * Vol),
    "inductor energy": ("0.5*L*I**2", (V("L", 1e-3, 1.0, unit="H"), V("I", 0.1, 10.0, unit="A")),
                        lambda L, I: 0.5 * L * I**2),
    "max height": ("v**2*sin(th)**2/19.62", (V("v", 1.0, 30.0, unit="m/s"), V("th", 0.1, 1.4, unit="rad")),
                   lambda v, th: v**2 * np.sin(th) ** 2 / 19.62),
    "Doppler source": ("f0*343/(343 - v)", (V("f0", 100.0, 1000.0, unit="Hz"), V("v", 0.0, 100.0, unit="m/s")),
                       lambda f0, v: f0 * 343 / (343 - v)),
    "resonance (w)": ("1/sqrt((100 - w**2)**2 + 4*w**2)", (V("w", 1.0, 20.0, unit="rad/s"),),
                      lambda w: 1 / np.sqrt((100 - w**2) ** 2 + 4 * w**2)),
    "thermometer (t)": ("20 + 80*exp(-t/30)", (V("t", 0.0, 200.0, unit="s"),), lambda t: 20 + 80 * np.exp(-t / 30)),
    "activity": ("lam*N0*exp(-lam*t)", (V("lam", 1e-3, 1e-2, unit="1/s"), V("N0", 1e3, 1e6),
                                        V("t", 0.0, 500.0, unit="s")),
                 lambda lam, N0, t: lam * N0 * np.exp(-lam * t)),
    "lensmaker": ("(n - 1)*(1/R1 - 1/R2)", (V("n", 1.3, 1.9), V("R1", 0.05, 0.5, unit="m"),
                                            V("R2", -0.5, -0.05, unit="m")),
                  lambda n, R1, R2: (n - 1) * (1 / R1 - 1 / R2)),
    "isothermal work": ("8.314*n*T*log(V2/V1)", (V("n", 0.1, 2.0, unit="mol"), V("T", 250.0, 400.0, unit="K"),
                        V("V1", 1e-3, 1e-2, unit="m^3"), V("V2", 1e-2, 1e-1, unit="m^3")),
                        lambda n, T, V1, V2: 8.314 * n * T * np.log(V2 / V1)),
    "single slit": ("I0*(sin(a)/a)**2", (V("I0", 1.0, 10.0, unit="W/m^2"), V("a", 0.1, 10.0, unit="rad")),
                    lambda I0, a: I0 * (np.sin(a) / a) ** 2),
    "Gaussian beam": ("2*P*exp(-2*r**2/w**2)/(pi*w**2)", (V("P", 1e-3, 1.0, unit="W"), V("r", 0.0, 2e-3, unit="m"),
                      V("w", 1e-3, 3e-3, unit="m")), lambda P, r, w: 2 * P * np.exp(-2 * r**2 / w**2) / (np.pi * w**2)),
    "creep (s)": ("2.5e-10*s**3.2", (V("s", 10.0, 100.0, unit="MPa"),), lambda s: 2.5e-10 * s**3.2),
    "skin depth": ("503.3*sqrt(rho/f)", (V("rho", 1e-8, 1e-6, unit="ohm*m"), V("f", 1e3, 1e6, unit="Hz")),
                   lambda rho, f: 503.3 * np.sqrt(rho / f)),
    "orbital velocity": ("sqrt(3.986e14/r)", (V("r", 6.4e6, 4.2e7, unit="m"),), lambda r: np.sqrt(3.986e14 / r)),
    "heat loss": ("h*A*(T - 293.15)", (V("h", 5.0, 50.0, unit="W/m^2/K"), V("A", 0.1, 2.0, unit="m^2"),
                  V("T", 300.0, 400.0, unit="K")), lambda h, A, T: h * A * (T - 293.15)),
    "Torricelli": ("sqrt(19.62*h)", (V("h", 0.01, 5.0, unit="m"),), lambda h: np.sqrt(19.62 * h)),
    "centripetal period": ("4*pi**2*m*r/T**2", (V("m", 0.1, 10.0, unit="kg"), V("r", 0.1, 2.0, unit="m"),
                           V("T", 0.5, 5.0, unit="s")), lambda m, r, T: 4 * np.pi**2 * m * r / T**2),
    "reactance": ("1/(2*pi*f*C)", (V("f", 50.0, 1e4, unit="Hz"), V("C", 1e-9, 1e-5, unit="F")),
                  lambda f, C: 1 / (2 * np.pi * f * C)),
    "pendulum damped": ("th0*exp(-t/tau)*cos(6.2832*t/T)", (V("th0", 0.05, 0.3, unit="rad"),
                                                            V("t", 0.0, 10.0, unit="s"),
                        V("tau", 5.0, 50.0, unit="s"), V("T", 1.0, 3.0, unit="s")),
                        lambda th0, t, tau, T: th0 * np.exp(-t / tau) * np.cos(6.2832 * t / T)),
    "wire resistance": ("1.68e-8*L/A", (V("L", 0.1, 100.0, unit="m"), V("A", 1e-7, 1e-5, unit="m^2")),
                        lambda L, A: 1.68e-8 * L / A),
    "sinc2 (a)": ("(sin(a)/a)**2", (V("a", 0.1, 10.0, unit="rad"),), lambda a: (np.sin(a) / a) ** 2),
    "beam profile (r)": ("exp(-2*r**2/4e-6)", (V("r", 0.0, 2e-3, unit="m"),), lambda r: np.exp(-2 * r**2 / 4e-6)),
}

def run_one(name: str, level: float, seed: int, digits: int = 0, relative: bool = False,
            wild: float = 0.0) -> dict[str, Any]:
    truth, variables, law = LAWS[name] if name in LAWS else HELD_OUT[name]
    spec = OracleSpec(variables=variables, output=Output("y", ""), name=f"rig:{name}")
    lo, hi = np.array([v.low for v in variables]), np.array([v.high for v in variables])
    spread = np.std(law(*(lo + (hi - lo) * np.random.default_rng(1).random((100_000, len(variables)))).T))
    noise = np.random.default_rng([seed, 17])

    def measure(X: np.ndarray) -> np.ndarray:
        truth = law(*X.T)
        y = truth + level * (np.abs(truth) if relative else spread) * noise.standard_normal(len(X))
        if wild:
            y = np.where(noise.random(len(X)) < wild, y * noise.uniform(0.0, 3.0, len(X)), y)
        return np.array([float(f"{v:.{digits - 1}e}") for v in y]) if digits else y

    start = time.process_time()
    result = run_search("racing", CallableOracle(measure, spec), SearchConfig(), seed=seed)
    cpu = time.process_time() - start
    return {"law": name, "noise": level, "seed": seed, "found": result.best.expression,
            "exact": is_exact(result.best.sympy_expr, truth, variables=variables),
            "nmse": result.nmse_test, "cpu": cpu, "points": result.points_measured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--noise", default="0,0.01", help="noise levels, comma-separated (default 0,0.01)")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--laws", default="", help="names from LAWS, comma-separated (default: all)")
    parser.add_argument("--held-out", action="store_true", help="the laws of HELD_OUT instead, which no change "
                                                                "was tuned on")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument("--digits", type=int, default=0, help="significant digits each reading is rounded to "
                                                              "(default 0: not rounded)")
    parser.add_argument("--relative", action="store_true", help="noise a fraction of each reading, not of std(y)")
    parser.add_argument("--wild", type=float, default=0.0, help="fraction of readings that are wild: times a "
                                                                "uniform draw from 0 to 3, as a loose contact gives")
    args = parser.parse_args()
    if args.digits < 0 or args.digits > 17:
        parser.error(f"--digits must be 0 (not rounded) to 17, got {args.digits}")
    if not 0 <= args.wild < 1:
        parser.error(f"--wild must be a fraction from 0 to below 1, got {args.wild}")
    known = HELD_OUT if args.held_out else LAWS
    names = [n.strip() for n in args.laws.split(",") if n.strip()] or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown law(s) {', '.join(unknown)}; known: {', '.join(known)}")
    levels = [float(x) for x in args.noise.split(",")]
    runs = [(n, level, seed, args.digits, args.relative, args.wild) for level in levels for n in names for seed in range(args.seeds)]
    exact: dict[float, int] = {level: 0 for level in levels}
    # A seed gives the same path on one machine only: say which machine the lines come from.
    print("environment " + ", ".join(f"{k} {v}" for k, v in environment().items()), flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        for out in pool.map(run_one, *zip(*runs)):
            exact[out["noise"]] += out["exact"]
            print(f"{out['law']:20s} noise {out['noise']:<5g} seed {out['seed']}  "
                  f"{'exact' if out['exact'] else 'not exact':9s}  NMSE {out['nmse']:.2g}  "
                  f"CPU {out['cpu']:5.1f} s  points {out['points']:,}  {out['found']}", flush=True)
    rounded = ((", of each reading" if args.relative else "") + (f", readings to {args.digits} digits" if args.digits else "")
               + (f", {args.wild:g} of readings wild" if args.wild else ""))
    for level in levels:
        print(f"noise {level:g}{rounded}: {exact[level]} of {len(names) * args.seeds} exact")


if __name__ == "__main__":
    main()

"""DOP853: Dormand and Prince's explicit Runge–Kutta pair of order 8(5,3) with its 7th-order dense output.

The coefficients are Hairer's (``dop853.f``, Hairer, Nørsett and Wanner, *Solving Ordinary Differential Equations
I*, 2nd ed., §II.10), the same numbers as scipy's ``scipy.integrate._ivp.dop853_coefficients`` (tests compare
the two to the last bit). This module is the one home of the adaptive tableau; :func:`c_driver` writes it into
the C integrator of :mod:`pdsl.sim.native`, with the step-size control of scipy's ``solve_ivp(method="DOP853")``
(safety 0.9, factors 0.2 … 10, error exponent −1/8, Hairer's starting step), so that the compiled integrator
takes the same steps as scipy's at the same tolerances.

Layout: stages 0 … 11 make the step (``A[:12]``, ``B``, ``C[:12]``); stage 12 is f at the new point (first same as
last); ``E5`` and ``E3`` (13 weights) give the 5th- and 3rd-order error estimates, combined as in Hairer's code;
stages 13 … 15 (``A[13:]``, ``C[13:]``) and ``D`` make the dense output's polynomial.
"""

from __future__ import annotations

__all__ = ["A", "B", "C", "D", "E3", "E5", "N_STAGES", "N_STAGES_EXTENDED", "c_driver", "ctl_size", "STIFF_AFTER"]

N_STAGES = 12
N_STAGES_EXTENDED = 16
SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 10.0
ERROR_EXPONENT = -1.0 / 8.0  # −1/(order of the error estimator + 1)
ORDER_FOR_START = 7  # Hairer's starting step uses the error estimator's order

# Stiffness detection (Hairer's dop853.f, HNW II §IV.2): after each accepted step the estimate
# h·|λ| ≈ h‖f(t+h, y₁) − f(t+h, ŷ)‖/‖y₁ − ŷ‖ (ŷ the point of stage 11, also at t + h) is compared with the
# boundary of DOP853's stability region on the negative real axis (≈ 6.1): a step whose size the stability, not
# the accuracy, limits. STIFF_AFTER such steps in a row (interrupted only by NONSTIFF_RESET non-stiff ones) mean
# the problem is stiff: the run stops there (return code 5) so that an implicit method takes over.
# Hairer tests every 1000th step against 6.1 and asks for 15 in a row; the auto integrator tests every step
# (2·nx flops) against 0.9 × 6.1 (DifferentialEquations.jl's stifftol 9/10): at 6.1 itself the step controller
# keeps a stability-limited step just below the boundary often enough to reset the count (x' = −10⁴(x − cos t):
# detected at t = 1.57, 2,600 steps after the transient; at 5.5, t = 0.014; the harmonic oscillator over 100
# periods at rtol 1e-2 … 1e-11 never fires).
STIFF_H_LAMBDA = 5.5
STIFF_AFTER = 15
NONSTIFF_RESET = 6
# ctl, the driver's control vector (in/out): the step size to start with (0: Hairer's starting step) and, out, the
# one to take next; the stiffness test's count (0: off) and its two counters (carried across a resumed run); the
# last h·|λ| above the boundary; the output rows written; the state where the run stopped (nx values).
CTL_H, CTL_STIFF_AFTER, CTL_IASTI, CTL_NONSTI, CTL_HLAMB, CTL_ROWS, CTL_Y = range(7)


def ctl_size(nx: int) -> int:
    return CTL_Y + max(nx, 1)

# A[i] holds row i below the diagonal (a_ij, j < i)
C = (0.0, 0.05260015195876773, 0.0789002279381516, 0.1183503419072274, 0.2816496580927726, 0.3333333333333333, 0.25, 0.3076923076923077, 0.6512820512820513, 0.6, 0.8571428571428571, 1.0, 1.0, 0.1, 0.2, 0.7777777777777778)
A = (
    (),
    (0.05260015195876773,),
    (0.0197250569845379, 0.0591751709536137),
    (0.02958758547680685, 0.0, 0.08876275643042054),
    (0.2413651341592667, 0.0, -0.8845494793282861, 0.924834003261792),
    (0.037037037037037035, 0.0, 0.0, 0.17082860872947386, 0.12546768756682242),
    (0.037109375, 0.0, 0.0, 0.17025221101954405, 0.06021653898045596, -0.017578125),
    (0.03709200011850479, 0.0, 0.0, 0.17038392571223998, 0.10726203044637328, -0.015319437748624402, 0.008273789163814023),
    (0.6241109587160757, 0.0, 0.0, -3.3608926294469414, -0.868219346841726, 27.59209969944671, 20.154067550477894, -43.48988418106996),
    (0.47766253643826434, 0.0, 0.0, -2.4881146199716677, -0.590290826836843, 21.230051448181193, 15.279233632882423, -33.28821096898486, -0.020331201708508627),
    (-0.9371424300859873, 0.0, 0.0, 5.186372428844064, 1.0914373489967295, -8.149787010746927, -18.52006565999696, 22.739487099350505, 2.4936055526796523, -3.0467644718982196),
    (2.273310147516538, 0.0, 0.0, -10.53449546673725, -2.0008720582248625, -17.9589318631188, 27.94888452941996, -2.8589982771350235, -8.87285693353063, 12.360567175794303, 0.6433927460157636),
    (0.054293734116568765, 0.0, 0.0, 0.0, 0.0, 4.450312892752409, 1.8915178993145003, -5.801203960010585, 0.3111643669578199, -0.1521609496625161, 0.20136540080403034, 0.04471061572777259),
    (0.056167502283047954, 0.0, 0.0, 0.0, 0.0, 0.0, 0.25350021021662483, -0.2462390374708025, -0.12419142326381637, 0.15329179827876568, 0.00820105229563469, 0.007567897660545699, -0.008298),
    (0.03183464816350214, 0.0, 0.0, 0.0, 0.0, 0.028300909672366776, 0.053541988307438566, -0.05492374857139099, 0.0, 0.0, -0.00010834732869724932, 0.0003825710908356584, -0.00034046500868740456, 0.1413124436746325),
    (-0.42889630158379194, 0.0, 0.0, 0.0, 0.0, -4.697621415361164, 7.683421196062599, 4.06898981839711, 0.3567271874552811, 0.0, 0.0, 0.0, -0.0013990241651590145, 2.9475147891527724, -9.15095847217987),
)
B = (0.054293734116568765, 0.0, 0.0, 0.0, 0.0, 4.450312892752409, 1.8915178993145003, -5.801203960010585, 0.3111643669578199, -0.1521609496625161, 0.20136540080403034, 0.04471061572777259)
E3 = (-0.18980075407240762, 0.0, 0.0, 0.0, 0.0, 4.450312892752409, 1.8915178993145003, -5.801203960010585, -0.4226823213237919, -0.1521609496625161, 0.20136540080403034, 0.02265179219836082, 0.0)
E5 = (0.01312004499419488, 0.0, 0.0, 0.0, 0.0, -1.2251564463762044, -0.4957589496572502, 1.6643771824549864, -0.35032884874997366, 0.3341791187130175, 0.08192320648511571, -0.022355307863886294, 0.0)
D = (
    (-8.428938276109013, 0.0, 0.0, 0.0, 0.0, 0.5667149535193777, -3.0689499459498917, 2.38466765651207, 2.117034582445028, -0.871391583777973, 2.2404374302607883, 0.6315787787694688, -0.08899033645133331, 18.148505520854727, -9.194632392478356, -4.436036387594894),
    (10.427508642579134, 0.0, 0.0, 0.0, 0.0, 242.28349177525817, 165.20045171727028, -374.5467547226902, -22.113666853125306, 7.733432668472264, -30.674084731089398, -9.332130526430229, 15.697238121770845, -31.139403219565178, -9.35292435884448, 35.81684148639408),
    (19.985053242002433, 0.0, 0.0, 0.0, 0.0, -387.0373087493518, -189.17813819516758, 527.8081592054236, -11.57390253995963, 6.8812326946963, -1.0006050966910838, 0.7777137798053443, -2.778205752353508, -60.19669523126412, 84.32040550667716, 11.99229113618279),
    (-25.69393346270375, 0.0, 0.0, 0.0, 0.0, -154.18974869023643, -231.5293791760455, 357.6391179106141, 93.40532418362432, -37.45832313645163, 104.0996495089623, 29.8402934266605, -43.53345659001114, 96.32455395918828, -39.17726167561544, -149.72683625798564),
)


def _c_array(name: str, rows) -> str:
    """``static const double name[..][..]`` (or 1-D) with every value written exactly (repr round-trips)."""
    if rows and isinstance(rows[0], tuple):
        width = max(len(r) for r in rows)
        body = ",\n  ".join("{" + ", ".join(repr(v) for v in (*r, *([0.0] * (width - len(r))))) + "}" if width else "{0}"
                            for r in rows)
        return f"static const double {name}[{len(rows)}][{max(width, 1)}] = {{\n  {body}\n}};\n"
    return f"static const double {name}[{len(rows)}] = {{{', '.join(repr(v) for v in rows)}}};\n"


def c_driver(fname: str, nx: int, np_: int, nerr: int | None = None) -> str:
    """C source of ``int pdsl_dop853(...)`` integrating ``dx/dt = fname(t, x, p)`` (CasADi's generated C calling
    convention, in the same translation unit) over an increasing output grid. Only the first ``nerr`` components
    (default all) enter the error norm, the starting step and the stiffness test: the others are quadratures that
    ride along on the steps of the first (∫ power dt), which are then the same steps, bit for bit, as without them.

    ``pdsl_dop853(x0, p, t0, tout, nout, rtol, atol, max_steps, X, stats, t_fail, ctl)`` writes X[k·nx + i] = x_i
    at tout[k] (k = 0 … nout − 1; outputs at t0 are x0, the others the dense output of the step that contains them)
    and returns 0, or 1 (more than max_steps steps towards one output time), 2 (step size below 10 ulp of t), 3 (the right-hand side
    failed or is not finite at the start or inside an accepted step; at a step's trial points it rejects the step,
    as an error norm of NaN does in scipy), 4 (out of memory), 5 (stiff: the stiffness test fired ``ctl[CTL_STIFF_AFTER]`` times
    in a row); ``stats`` = (evaluations, accepted steps, rejected steps) and ``*t_fail`` the time reached. ``ctl``
    (:func:`ctl_size` doubles, the ``CTL_*`` layout) carries the starting step size and the stiffness test in, and
    out the rows written, the next step size, the counters and the state reached: a run stopped at a step's end
    resumes from there with the very steps it would have taken (:class:`pdsl.sim.native.VmDop853` hands over to this
    driver that way). Work memory is allocated per call, and the CasADi function is checked out per
    call (its ``checkout``/``release``, under a mutex): calls from several threads at once are safe."""
    nerr = nx if nerr is None else nerr
    a_full = tuple(tuple(A[i]) + (0.0,) * (N_STAGES_EXTENDED - len(A[i])) for i in range(N_STAGES_EXTENDED))
    f = fname
    return f"""
/* ---- DOP853 driver (pdsl.numerics.dop853) ---- */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#define PD_NX {nx}
#define PD_NERR {nerr}  /* the components in the error norm and the stiffness test: the rest ride along */
#define PD_NP {np_}
#define PD_NS {N_STAGES}
#define PD_NE {N_STAGES_EXTENDED}
#define CTL_H {CTL_H}
#define CTL_STIFF_AFTER {CTL_STIFF_AFTER}
#define CTL_IASTI {CTL_IASTI}
#define CTL_NONSTI {CTL_NONSTI}
#define CTL_HLAMB {CTL_HLAMB}
#define CTL_ROWS {CTL_ROWS}
#define CTL_Y {CTL_Y}
{_c_array("PD_C", C)}{_c_array("PD_A", a_full)}{_c_array("PD_B", B)}{_c_array("PD_E3", E3)}{_c_array("PD_E5", E5)}{_c_array("PD_D", D)}
/* CasADi's checkout/release keep a stack of memory slots for functions that need memory: not thread-safe */
static pthread_mutex_t pd_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {{ const casadi_real** arg; casadi_real** res; casadi_int* iw; casadi_real* w; int mem;
                 const double* p; long nfev; double t; }} pd_ctx;

static int pd_rhs(pd_ctx* c, double t, const double* x, double* out) {{
  int i;
  c->t = t;
  c->arg[0] = &c->t; c->arg[1] = x; c->arg[2] = c->p; c->res[0] = out;
  c->nfev++;
  if ({f}(c->arg, c->res, c->iw, c->w, c->mem)) return 3;
  for (i = 0; i < PD_NX; ++i) if (!isfinite(out[i])) return 3;
  return 0;
}}

/* stages first … last − 1 of a step of size h from (t, y): K[s] = f(t + c_s h, y + h Σ_j a_sj K[j]). Every sum
   skips the tableau's zeros, as CasADi's graphs of the same sums do (VmDop853: x·0 is not formed), so that an inf in a
   stage meets the same arithmetic in both (inf·0 would be NaN here only). */
static int pd_stages(pd_ctx* c, double t, double h, const double* y, double* K, double* tmp, int first, int last) {{
  int s, i, j, rc;
  for (s = first; s < last; ++s) {{
    for (i = 0; i < PD_NX; ++i) {{
      double acc = 0.0;
      for (j = 0; j < s; ++j) if (PD_A[s][j] != 0.0) acc += K[j * PD_NX + i] * PD_A[s][j];
      tmp[i] = y[i] + acc * h;
    }}
    if ((rc = pd_rhs(c, t + PD_C[s] * h, tmp, K + s * PD_NX))) return rc;
  }}
  return 0;
}}

static double pd_rms(const double* v, const double* scale) {{
  double s = 0.0; int i;
  for (i = 0; i < PD_NERR; ++i) {{ double r = v[i] / scale[i]; s += r * r; }}
  return sqrt(s / PD_NERR);
}}

CASADI_SYMBOL_EXPORT int pdsl_dop853(const double* x0, const double* p, double t0, const double* tout, long nout,
                                     double rtol, double atol, long max_steps, double* X, long* stats, double* t_fail,
                                     double* ctl) {{
  casadi_int sz_arg, sz_res, sz_iw, sz_w;
  pd_ctx c;
  double *K, *y = 0, *yn, *tmp, *F, *sc;
  double t = t0, t_bound, h_abs = 0.0, h, t_new;
  long io = 0, nacc = 0, nrej = 0, since = 0;  /* since: accepted steps since the last output */
  long stiff_after = (long) ctl[CTL_STIFF_AFTER], iasti = (long) ctl[CTL_IASTI], nonsti = (long) ctl[CTL_NONSTI];
  int i, j, s, rc = 0, stiff = 0;
  {f}_work(&sz_arg, &sz_res, &sz_iw, &sz_w);
  c.arg = (const casadi_real**) malloc(sizeof(casadi_real*) * (sz_arg > 3 ? sz_arg : 3));
  c.res = (casadi_real**) malloc(sizeof(casadi_real*) * (sz_res > 1 ? sz_res : 1));
  c.iw = (casadi_int*) malloc(sizeof(casadi_int) * (sz_iw > 1 ? sz_iw : 1));
  c.w = (casadi_real*) malloc(sizeof(casadi_real) * (sz_w > 1 ? sz_w : 1));
  c.nfev = 0;
  K = (double*) malloc(sizeof(double) * PD_NX * (PD_NE + 4 + 7));
  if (!c.arg || !c.res || !c.iw || !c.w || !K) {{ rc = 4; goto done; }}
  y = K + PD_NE * PD_NX; yn = y + PD_NX; tmp = yn + PD_NX; sc = tmp + PD_NX; F = sc + PD_NX;
  pthread_mutex_lock(&pd_lock);
  {f}_incref();
  c.mem = {f}_checkout();
  if (c.mem < 0) {f}_decref();
  pthread_mutex_unlock(&pd_lock);
  if (c.mem < 0) {{ rc = 4; goto done; }}
  c.p = p;
  memcpy(y, x0, sizeof(double) * PD_NX);
  while (io < nout && tout[io] <= t0) {{ memcpy(X + io * PD_NX, x0, sizeof(double) * PD_NX); ++io; }}
  if (io >= nout) goto release;
  t_bound = tout[nout - 1];
  if ((rc = pd_rhs(&c, t, y, K))) goto release;  /* K[0] = f(t0, x0) */
  if (ctl[CTL_H] > 0.0) h_abs = ctl[CTL_H];  /* resumed: the step size the interrupted run would take next */
  else {{ /* Hairer's starting step (scipy's select_initial_step) */
    double d0, d1, d2, h0, h1, dmax;
    for (i = 0; i < PD_NX; ++i) sc[i] = atol + fabs(y[i]) * rtol;
    d0 = pd_rms(y, sc); d1 = pd_rms(K, sc);
    h0 = (d0 < 1e-5 || d1 < 1e-5) ? 1e-6 : 0.01 * d0 / d1;
    if (h0 > t_bound - t0) h0 = t_bound - t0;
    for (i = 0; i < PD_NX; ++i) tmp[i] = y[i] + h0 * K[i];
    if ((rc = pd_rhs(&c, t0 + h0, tmp, yn))) goto release;
    for (i = 0; i < PD_NX; ++i) tmp[i] = yn[i] - K[i];
    d2 = pd_rms(tmp, sc) / h0;
    dmax = d1 > d2 ? d1 : d2;
    h1 = (d1 <= 1e-15 && d2 <= 1e-15) ? (h0 * 1e-3 > 1e-6 ? h0 * 1e-3 : 1e-6) : pow(0.01 / dmax, 1.0 / ({ORDER_FOR_START} + 1));
    h_abs = 100 * h0;
    if (h1 < h_abs) h_abs = h1;
    if (t_bound - t0 < h_abs) h_abs = t_bound - t0;
  }}
  while (io < nout) {{
    double min_step = 10 * fabs(nextafter(t, INFINITY) - t), err_norm = 0.0;
    int accepted = 0, rejected = 0;
    if (h_abs < min_step) h_abs = min_step;
    while (!accepted) {{
      double e5 = 0.0, e3 = 0.0;
      if (h_abs < min_step) {{ rc = 2; goto release; }}
      h = h_abs; t_new = t + h;
      if (t_new > t_bound) t_new = t_bound;
      h = t_new - t; h_abs = fabs(h);
      rc = pd_stages(&c, t, h, y, K, tmp, 1, PD_NS);
      if (!rc) {{
        for (i = 0; i < PD_NX; ++i) {{
          double acc = 0.0;
          for (j = 0; j < PD_NS; ++j) if (PD_B[j] != 0.0) acc += K[j * PD_NX + i] * PD_B[j];
          yn[i] = y[i] + h * acc;
        }}
        rc = pd_rhs(&c, t + h, yn, K + PD_NS * PD_NX);  /* K[12] = f(t_new, y_new) */
      }}
      if (rc == 3) {{ /* f not finite at a trial point: a rejected step (an error norm of NaN: the smallest factor) */
        h_abs *= {MIN_FACTOR!r};
        rejected = 1; ++nrej; rc = 0;
        continue;
      }}
      if (rc) goto release;
      for (i = 0; i < PD_NERR; ++i) {{
        double a5 = 0.0, a3 = 0.0, m = fabs(y[i]) > fabs(yn[i]) ? fabs(y[i]) : fabs(yn[i]);
        double scale = atol + m * rtol;
        for (j = 0; j <= PD_NS; ++j) {{
          if (PD_E5[j] != 0.0) a5 += K[j * PD_NX + i] * PD_E5[j];
          if (PD_E3[j] != 0.0) a3 += K[j * PD_NX + i] * PD_E3[j];
        }}
        a5 /= scale; a3 /= scale;
        e5 += a5 * a5; e3 += a3 * a3;
      }}
      err_norm = (e5 == 0.0 && e3 == 0.0) ? 0.0 : h_abs * e5 / sqrt((e5 + 0.01 * e3) * PD_NERR);
      if (err_norm < 1.0) {{
        double factor = err_norm == 0.0 ? {MAX_FACTOR!r} : {SAFETY!r} * pow(err_norm, {ERROR_EXPONENT!r});
        if (factor > {MAX_FACTOR!r}) factor = {MAX_FACTOR!r};
        if (rejected && factor > 1.0) factor = 1.0;
        h_abs *= factor;
        accepted = 1;
      }} else {{
        double factor = {SAFETY!r} * pow(err_norm, {ERROR_EXPONENT!r});
        h_abs *= factor > {MIN_FACTOR!r} ? factor : {MIN_FACTOR!r};
        rejected = 1; ++nrej;
      }}
    }}
    ++nacc; ++since;
    if (stiff_after > 0) {{ /* Hairer's stiffness test (dop853.f): h·|λ| ≈ h‖f(y₁) − f(ŷ)‖/‖y₁ − ŷ‖, ŷ stage 11's point */
      double stnum = 0.0, stden = 0.0;
      for (i = 0; i < PD_NERR; ++i) {{
        double a = K[PD_NS * PD_NX + i] - K[(PD_NS - 1) * PD_NX + i], b = yn[i] - tmp[i];
        stnum += a * a; stden += b * b;
      }}
      if (stden > 0.0 && fabs(h) * sqrt(stnum / stden) > {STIFF_H_LAMBDA!r}) {{
        ctl[CTL_HLAMB] = fabs(h) * sqrt(stnum / stden);
        nonsti = 0;
        if (++iasti >= stiff_after) stiff = 1;
      }} else if (++nonsti == {NONSTIFF_RESET}) iasti = 0;
    }}
    if (tout[io] <= t_new) {{ /* dense output: three more stages and the interpolant's 7 coefficient rows */
      if ((rc = pd_stages(&c, t, h, y, K, tmp, PD_NS + 1, PD_NE))) goto release;
      for (i = 0; i < PD_NX; ++i) {{
        double dy = yn[i] - y[i];
        F[i] = dy;
        F[PD_NX + i] = h * K[i] - dy;
        F[2 * PD_NX + i] = 2 * dy - h * (K[PD_NS * PD_NX + i] + K[i]);
        for (s = 0; s < 4; ++s) {{
          double acc = 0.0;
          for (j = 0; j < PD_NE; ++j) if (PD_D[s][j] != 0.0) acc += PD_D[s][j] * K[j * PD_NX + i];
          F[(3 + s) * PD_NX + i] = h * acc;
        }}
      }}
      since = 0;
      while (io < nout && tout[io] <= t_new) {{
        double x = (tout[io] - t) / h;
        for (i = 0; i < PD_NX; ++i) {{
          double v = 0.0;
          for (s = 0; s < 7; ++s) {{
            v += F[(6 - s) * PD_NX + i];
            v *= (s % 2 == 0) ? x : 1 - x;
          }}
          X[io * PD_NX + i] = v + y[i];
        }}
        ++io;
      }}
    }}
    t = t_new;
    memcpy(y, yn, sizeof(double) * PD_NX);
    memcpy(K, K + PD_NS * PD_NX, sizeof(double) * PD_NX);  /* first same as last */
    if (io < nout && stiff) {{ rc = 5; goto release; }}
    if (io < nout && since >= max_steps) {{ rc = 1; goto release; }}
  }}
release:
  ctl[CTL_H] = h_abs; ctl[CTL_IASTI] = (double) iasti; ctl[CTL_NONSTI] = (double) nonsti; ctl[CTL_ROWS] = (double) io;
  if (y) memcpy(ctl + CTL_Y, y, sizeof(double) * PD_NX);
  pthread_mutex_lock(&pd_lock);
  {f}_release(c.mem);
  {f}_decref();
  pthread_mutex_unlock(&pd_lock);
done:
  if (stats) {{ stats[0] = c.nfev; stats[1] = nacc; stats[2] = nrej; }}
  if (t_fail) *t_fail = t;
  free(c.arg); free(c.res); free(c.iw); free(c.w); free(K);
  return rc;
}}
"""

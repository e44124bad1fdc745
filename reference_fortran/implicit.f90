! pompy Fortran oracle: the semi-implicit free surface (issue 11; not pom2k),
! the twin of pompy.core.external.implicit (implicit_step) and
! pompy.core.external.cg (the reference conjugate gradients), operation
! for operation in the same order and grouping. The equations are in
! pompy/core/external/implicit.py's docstring.
!   cg_apply            the five-point operator A x (identity rows where not active)
!   cg_dot              sum over the grid of a*b, in the order of torch's CPU sum
!   cg_solve            plain CG to the relative residual tol, at most maxiter iterations
!   implicit_faces      whole face-transport fields from their interior and edge parts
!   implicit_step       one semi-implicit external step of dti (run_steps' scheme 2,
!                       stepping.f90)


subroutine cg_apply(im, jm, diag, cx, cy, active, x, ax)
  ! ax = A x: on the active cells (active /= 0)
  !   diag x - cx x(i-1) - cx(i+1) x(i+1) - cy x(j-1) - cy(j+1) x(j+1),
  ! cx(i,j) the face between i-1 and i, cy(i,j) that between j-1 and j;
  ! ax = x elsewhere. A neighbour beyond the grid reads the edge value
  ! (as pompy.ops), where the coefficients are zero.
  implicit none
  integer, intent(in) :: im, jm
  real(8), intent(in), dimension(im,jm) :: diag, cx, cy, active, x
  real(8), intent(inout) :: ax(im,jm)
  integer :: i, j, iw, ie, js, jn

  do j = 1, jm
    js = max(j-1, 1)
    jn = min(j+1, jm)
    do i = 1, im
      iw = max(i-1, 1)
      ie = min(i+1, im)
      if (active(i,j) /= 0.d0) then
        ax(i,j) = diag(i,j)*x(i,j) - cx(i,j)*x(iw,j) - cx(ie,j)*x(ie,j) &
                  - cy(i,j)*x(i,js) - cy(i,jn)*x(i,jn)
      else
        ax(i,j) = x(i,j)
      end if
    end do
  end do
end subroutine cg_apply


subroutine cg_dot(im, jm, a, b, ab)
  ! ab = the sum of a*b over the grid, added in the order of torch's CPU
  ! sum of a contiguous float64 tensor (ATen's cascade_sum, whose x86
  ! kernel runs on 4-wide vectors whatever the CPU), over the elements in
  ! torch's (i, j) order (j fastest), so that the torch core's reference
  ! CG is reproduced to the last bit: element n = (i-1)*jm + (j-1) goes to
  ! lane mod(n, 16) of 16 accumulators (4 rows of 4-wide vectors); blocks
  ! of 16 elements are summed in a cascade of 4 levels of chunks of 2**lp
  ! blocks, lp = max(4, ceil(log2(blocks))/4); then the left-over whole
  ! vectors into lanes 1..4, lanes 5..16 into lanes 1..4 (by vector),
  ! and the scalar total: the left-over elements, then lanes 1..4.
  implicit none
  integer, intent(in) :: im, jm
  real(8), intent(in), dimension(im,jm) :: a, b
  real(8), intent(out) :: ab
  real(8) :: acc(0:15,0:3)
  integer :: n, nvec, nblock, lp, step, mask, k, l, lev, blk, m, ii, jj

  n = im*jm
  nvec = n/4
  nblock = nvec/4
  ! CeilLog2(nblock) (1 for nblock <= 2), integer-divided by 4
  if (nblock <= 2) then
    lp = 1
  else
    lp = 0
    do while (ishft(1, lp) < nblock)
      lp = lp + 1
    end do
  end if
  lp = max(4, lp/4)
  step = ishft(1, lp)
  mask = step - 1
  do lev = 0, 3
    do l = 0, 15
      acc(l,lev) = 0.d0
    end do
  end do
  blk = 0
  do while (blk + step <= nblock)
    do k = 1, step
      do l = 0, 15
        m = blk*16 + l
        ii = m/jm + 1
        jj = mod(m, jm) + 1
        acc(l,0) = acc(l,0) + a(ii,jj)*b(ii,jj)
      end do
      blk = blk + 1
    end do
    do lev = 1, 3
      do l = 0, 15
        acc(l,lev) = acc(l,lev) + acc(l,lev-1)
        acc(l,lev-1) = 0.d0
      end do
      if (iand(blk, ishft(mask, lev*lp)) /= 0) exit
    end do
  end do
  do while (blk < nblock)
    do l = 0, 15
      m = blk*16 + l
      ii = m/jm + 1
      jj = mod(m, jm) + 1
      acc(l,0) = acc(l,0) + a(ii,jj)*b(ii,jj)
    end do
    blk = blk + 1
  end do
  do lev = 1, 3
    do l = 0, 15
      acc(l,0) = acc(l,0) + acc(l,lev)
    end do
  end do
  ! whole vectors left over (fewer than 4), into the first vector
  do k = nblock*4, nvec - 1
    do l = 0, 3
      m = k*4 + l
      ii = m/jm + 1
      jj = mod(m, jm) + 1
      acc(l,0) = acc(l,0) + a(ii,jj)*b(ii,jj)
    end do
  end do
  do k = 1, 3
    do l = 0, 3
      acc(l,0) = acc(l,0) + acc(k*4+l,0)
    end do
  end do
  ab = 0.d0
  do m = nvec*4, n - 1
    ii = m/jm + 1
    jj = mod(m, jm) + 1
    ab = ab + a(ii,jj)*b(ii,jj)
  end do
  do l = 0, 3
    ab = ab + acc(l,0)
  end do
end subroutine cg_dot


subroutine cg_solve(im, jm, diag, cx, cy, active, b, tol, maxiter, x, residual, iters)
  ! Plain conjugate gradients for A x = b (cg_apply) from x = 0, until the
  ! recurrence's residual |r| <= tol |b| (|b| = 1 when b = 0) or maxiter
  ! iterations: x, residual = the true |b - A x|/|b| recomputed from x
  ! (the recurrence's drifts from it by rounding), iters the iterations
  ! taken. As
  ! pompy.core.external.cg.solve (whose masked iterations after
  ! convergence change nothing), its dot products summed by cg_dot in
  ! torch's order: the same iterates to the last bit.
  implicit none
  integer, intent(in) :: im, jm, maxiter
  real(8), intent(in), dimension(im,jm) :: diag, cx, cy, active, b
  real(8), intent(in) :: tol
  real(8), intent(inout) :: x(im,jm)
  real(8), intent(out) :: residual
  integer, intent(out) :: iters
  real(8) :: r(im,jm), p(im,jm), ap(im,jm)
  real(8) :: rr, bb, scale, limit, pap, alpha, rr_new, beta
  integer :: i, j

  do j = 1, jm
    do i = 1, im
      x(i,j) = 0.d0
    end do
  end do
  call cg_apply(im, jm, diag, cx, cy, active, x, ap)
  do j = 1, jm
    do i = 1, im
      r(i,j) = b(i,j) - ap(i,j)
      p(i,j) = r(i,j)
    end do
  end do
  call cg_dot(im, jm, r, r, rr)
  call cg_dot(im, jm, b, b, bb)
  if (bb > 0.d0) then
    scale = bb
  else
    scale = 1.d0
  end if
  limit = (tol*tol)*scale
  iters = 0
  do while (iters < maxiter .and. rr > limit)
    call cg_apply(im, jm, diag, cx, cy, active, p, ap)
    call cg_dot(im, jm, p, ap, pap)
    if (pap /= 0.d0) then
      alpha = rr/pap
    else
      alpha = rr/1.d0
    end if
    do j = 1, jm
      do i = 1, im
        x(i,j) = x(i,j) + alpha*p(i,j)
        r(i,j) = r(i,j) - alpha*ap(i,j)
      end do
    end do
    call cg_dot(im, jm, r, r, rr_new)
    if (rr /= 0.d0) then
      beta = rr_new/rr
    else
      beta = rr_new/1.d0
    end if
    do j = 1, jm
      do i = 1, im
        p(i,j) = r(i,j) + beta*p(i,j)
      end do
    end do
    rr = rr_new
    iters = iters + 1
  end do
  call cg_apply(im, jm, diag, cx, cy, active, x, ap)
  do j = 1, jm
    do i = 1, im
      r(i,j) = b(i,j) - ap(i,j)
    end do
  end do
  call cg_dot(im, jm, r, r, rr)
  residual = sqrt(rr/scale)
end subroutine cg_solve


subroutine implicit_faces(im, jm, iu, iv, fw, fe, fs, fn, fu, fv)
  ! Whole face fields: fu = iu on i=3..imm1, j=2..jmm1, the west and east
  ! edge transports fw, fe on i=2 and i=im, 0 elsewhere; fv likewise
  ! (iv on i=2..imm1, j=3..jmm1; fs, fn on j=2 and j=jm).
  implicit none
  integer, intent(in) :: im, jm
  real(8), intent(in) :: iu(im,jm), iv(im,jm), fw(jm), fe(jm), fs(im), fn(im)
  real(8), intent(inout) :: fu(im,jm), fv(im,jm)
  integer :: i, j

  do j = 1, jm
    do i = 1, im
      fu(i,j) = 0.d0
      fv(i,j) = 0.d0
    end do
  end do
  do j = 2, jm-1
    do i = 3, im-1
      fu(i,j) = iu(i,j)
    end do
  end do
  do j = 3, jm-1
    do i = 2, im-1
      fv(i,j) = iv(i,j)
    end do
  end do
  do j = 1, jm
    fu(2,j) = fw(j)
    fu(im,j) = fe(j)
  end do
  do i = 1, im
    fv(i,2) = fs(i)
    fv(i,jm) = fn(i)
  end do
end subroutine implicit_faces


subroutine implicit_step(im, jm, kb, mode, theta, dti, grav, hmax, small, ramp, &
                         rfe, rfw, rfn, rfs, cg_tol, cg_maxiter, &
                         zz, h, dx, dy, art, aru, arv, cor, fsm, dum, dvm, cbc, &
                         aam2d, adx2d, ady2d, drx2d, dry2d, wusurf, wvsurf, &
                         wubot, wvbot, e_atmos, vfluxf, &
                         ele, elw, eln, els, uabe, uabw, vabn, vabs, &
                         tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs, &
                         u, v, t, s, q2, q2l, uf, vf, w, dt, &
                         el, elb, elf, ua, uab, uaf, va, vab, vaf, d, etf, egf, &
                         utf, vtf, advua, advva, fluxua, fluxva, tps, &
                         vamax, imax, jmax, cg_residual, cg_iters)
  ! One semi-implicit external step of dt = dti replacing pom2k's isplit
  ! external passes (pompy.core.external.implicit.implicit_step): the
  ! elevation's gravity-wave terms weighted by theta, everything else of
  ! pom2k's uaf, vaf equations explicit at time n; the elevation equation
  ! (a symmetric positive definite five-point operator on the interior
  ! wet cells, identity rows elsewhere, the open edges' radiation
  ! condition implicit in its diagonal) solved by cg_solve; the transports
  ! of the solved elevation, then continuity itself for elf (bcond 1);
  ! uaf, vaf, the velocity check (vamax at imax, jmax), the internal
  ! mode's utf, vtf, egf, etf, the time-level shift; cg_residual and
  ! cg_iters the solver's relative residual and iterations. In mode 2
  ! advave(tps) first, as pom2k's external loop.
  implicit none
  integer, intent(in) :: im, jm, kb, mode, cg_maxiter
  real(8), intent(in) :: theta, dti, grav, hmax, small, ramp, rfe, rfw, rfn, rfs, cg_tol
  real(8), intent(in) :: zz(kb)
  real(8), intent(in), dimension(im,jm) :: h, dx, dy, art, aru, arv, cor, fsm, dum, &
      dvm, cbc, aam2d, adx2d, ady2d, drx2d, dry2d, wusurf, wvsurf, e_atmos, vfluxf, dt
  real(8), intent(inout) :: wubot(im,jm), wvbot(im,jm)
  real(8), intent(in) :: ele(jm), elw(jm), eln(im), els(im)
  real(8), intent(in) :: uabe(jm), uabw(jm), vabn(im), vabs(im)
  real(8), intent(in) :: tbe(jm,kb), tbw(jm,kb), tbn(im,kb), tbs(im,kb)
  real(8), intent(in) :: sbe(jm,kb), sbw(jm,kb), sbn(im,kb), sbs(im,kb)
  real(8), intent(in), dimension(im,jm,kb) :: u, v, t, s, q2, q2l
  real(8), intent(inout), dimension(im,jm,kb) :: uf, vf, w
  real(8), intent(inout), dimension(im,jm) :: el, elb, elf, ua, uab, uaf, va, vab, &
      vaf, d, etf, egf, utf, vtf, advua, advva, fluxua, fluxva, tps
  real(8), intent(out) :: vamax, cg_residual
  integer, intent(out) :: imax, jmax, cg_iters
  real(8), dimension(im,jm) :: g_u, g_v, k_u, k_v, f_u, f_v, old_u, old_v, star_u, &
      star_v, c_u, c_v, diag, a_u, a_v, rhs, active, solved, new_u, new_v, flux_u, &
      flux_v, mean_u, mean_v, dn
  logical :: interior(im,jm), open_u(im,jm), open_v(im,jm)
  real(8) :: a_w(jm), b_w(jm), a_e(jm), b_e(jm), a_s(im), b_s(im), a_n(im), b_n(im)
  real(8) :: fw(jm), fe(jm), fs(im), fn(im)
  real(8) :: dt_, r_u, r_v, wgt, speed, sgn, tw, te, ts, tn, radiating, divo, diva, &
      divm, dyu, dxv
  integer :: i, j, im1, jm1, imm1, jmm1

  imm1 = im - 1
  jmm1 = jm - 1
  dt_ = dti
  ! no vertical_averages in 2-D: advave here, as pom2k's loop
  if (mode == 2) &
    call advave(im, jm, mode, d, ua, va, uab, vab, aam2d, cbc, dx, dy, aru, arv, &
                advua, advva, fluxua, fluxva, wubot, wvbot, tps)

  ! the unknowns: interior wet cells; faces between two of them
  do j = 1, jm
    do i = 1, im
      interior(i,j) = i >= 2 .and. i <= imm1 .and. j >= 2 .and. j <= jmm1 &
                      .and. fsm(i,j) > 0.d0
    end do
  end do
  do j = 1, jm
    do i = 1, im
      open_u(i,j) = .false.
      open_v(i,j) = .false.
      if (i >= 2) open_u(i,j) = interior(i,j) .and. interior(i-1,j) .and. dum(i,j) > 0.d0
      if (j >= 2) open_v(i,j) = interior(i,j) .and. interior(i,j-1) .and. dvm(i,j) > 0.d0
    end do
  end do

  ! gravity factors G, k = dt dy_u/aru, the transports at time n, the
  ! explicit predictor F* (with R, pom2k's uaf, vaf terms but the
  ! elevation's) and the face coefficients c = theta^2 dt k G
  do j = 1, jm
    do i = 1, im
      g_u(i,j) = 0.d0
      g_v(i,j) = 0.d0
      k_u(i,j) = 0.d0
      k_v(i,j) = 0.d0
      f_u(i,j) = 0.d0
      f_v(i,j) = 0.d0
      star_u(i,j) = 0.d0
      star_v(i,j) = 0.d0
      c_u(i,j) = 0.d0
      c_v(i,j) = 0.d0
    end do
  end do
  do j = 1, jm
    do i = 2, im
      g_u(i,j) = .25d0*grav*(dy(i,j) + dy(i-1,j))*(d(i,j) + d(i-1,j))
      k_u(i,j) = dt_*.5d0*(dy(i,j) + dy(i-1,j))/aru(i,j)
    end do
  end do
  do j = 2, jm
    do i = 1, im
      g_v(i,j) = .25d0*grav*(dx(i,j) + dx(i,j-1))*(d(i,j) + d(i,j-1))
      k_v(i,j) = dt_*.5d0*(dx(i,j) + dx(i,j-1))/arv(i,j)
    end do
  end do
  do j = 1, jm
    do i = 1, im
      if (open_u(i,j)) then
        f_u(i,j) = .25d0*(d(i,j) + d(i-1,j))*(dy(i,j) + dy(i-1,j))*ua(i,j)
        r_u = adx2d(i,j) + advua(i,j) &
              - aru(i,j)*.25d0*(cor(i,j)*d(i,j)*(va(i,j+1) + va(i,j)) &
                                + cor(i-1,j)*d(i-1,j)*(va(i-1,j+1) + va(i-1,j))) &
              + .25d0*grav*(dy(i,j) + dy(i-1,j))*(d(i,j) + d(i-1,j)) &
                *(e_atmos(i,j) - e_atmos(i-1,j)) &
              + drx2d(i,j) + aru(i,j)*(wusurf(i,j) - wubot(i,j))
        star_u(i,j) = f_u(i,j) - k_u(i,j)*(r_u + (1.d0 - theta)*g_u(i,j) &
                                                 *(el(i,j) - el(i-1,j)))
        c_u(i,j) = theta*theta*dt_*k_u(i,j)*g_u(i,j)
      end if
      if (open_v(i,j)) then
        f_v(i,j) = .25d0*(d(i,j) + d(i,j-1))*(dx(i,j) + dx(i,j-1))*va(i,j)
        r_v = ady2d(i,j) + advva(i,j) &
              + arv(i,j)*.25d0*(cor(i,j)*d(i,j)*(ua(i+1,j) + ua(i,j)) &
                                + cor(i,j-1)*d(i,j-1)*(ua(i+1,j-1) + ua(i,j-1))) &
              + .25d0*grav*(dx(i,j) + dx(i,j-1))*(d(i,j) + d(i,j-1)) &
                *(e_atmos(i,j) - e_atmos(i,j-1)) &
              + dry2d(i,j) + arv(i,j)*(wvsurf(i,j) - wvbot(i,j))
        star_v(i,j) = f_v(i,j) - k_v(i,j)*(r_v + (1.d0 - theta)*g_v(i,j) &
                                                 *(el(i,j) - el(i,j-1)))
        c_v(i,j) = theta*theta*dt_*k_v(i,j)*g_v(i,j)
      end if
    end do
  end do

  ! the open edges: bcond 2's radiation transports a + b eta (eta of the
  ! cell inside), j=2..jmm1 west and east, i=2..imm1 south and north
  do j = 1, jm
    a_w(j) = 0.d0
    b_w(j) = 0.d0
    a_e(j) = 0.d0
    b_e(j) = 0.d0
  end do
  do i = 1, im
    a_s(i) = 0.d0
    b_s(i) = 0.d0
    a_n(i) = 0.d0
    b_n(i) = 0.d0
  end do
  do j = 2, jmm1
    ! west (sign -1: inflow positive)
    sgn = -1.d0
    wgt = .25d0*(dy(1,j) + dy(2,j))*(d(1,j) + d(2,j))*dum(2,j)*ramp
    speed = rfw*sqrt(grav/h(2,j))
    a_w(j) = wgt*(uabw(j) - sgn*speed*elw(j))
    b_w(j) = wgt*sgn*speed
    ! east
    sgn = 1.d0
    wgt = .25d0*(dy(imm1,j) + dy(im,j))*(d(imm1,j) + d(im,j))*dum(im,j)*ramp
    speed = rfe*sqrt(grav/h(imm1,j))
    a_e(j) = wgt*(uabe(j) - sgn*speed*ele(j))
    b_e(j) = wgt*sgn*speed
  end do
  do i = 2, imm1
    ! south
    sgn = -1.d0
    wgt = .25d0*(dx(i,1) + dx(i,2))*(d(i,1) + d(i,2))*dvm(i,2)*ramp
    speed = rfs*sqrt(grav/h(i,2))
    a_s(i) = wgt*(vabs(i) - sgn*speed*els(i))
    b_s(i) = wgt*sgn*speed
    ! north
    sgn = 1.d0
    wgt = .25d0*(dx(i,jmm1) + dx(i,jm))*(d(i,jmm1) + d(i,jm))*dvm(i,jm)*ramp
    speed = rfn*sqrt(grav/h(i,jmm1))
    a_n(i) = wgt*(vabn(i) - sgn*speed*eln(i))
    b_n(i) = wgt*sgn*speed
  end do

  ! the transports at time n (edges at el)
  do j = 1, jm
    fw(j) = a_w(j) + b_w(j)*el(2,j)
    fe(j) = a_e(j) + b_e(j)*el(imm1,j)
  end do
  do i = 1, im
    fs(i) = a_s(i) + b_s(i)*el(i,2)
    fn(i) = a_n(i) + b_n(i)*el(i,jmm1)
  end do
  call implicit_faces(im, jm, f_u, f_v, fw, fe, fs, fn, old_u, old_v)
  ! the predictor's faces, edges without their elevation term
  do j = 1, jm
    fw(j) = a_w(j) + 0.d0*el(2,j)
    fe(j) = a_e(j) + 0.d0*el(imm1,j)
  end do
  do i = 1, im
    fs(i) = a_s(i) + 0.d0*el(i,2)
    fn(i) = a_n(i) + 0.d0*el(i,jmm1)
  end do
  call implicit_faces(im, jm, star_u, star_v, fw, fe, fs, fn, a_u, a_v)

  ! the elevation equation: diagonal (with the edges' radiation) and
  ! right-hand side on the unknowns, identity rows elsewhere
  do j = 1, jm
    do i = 1, im
      tw = 0.d0
      te = 0.d0
      ts = 0.d0
      tn = 0.d0
      if (i == 2) tw = -b_w(j)
      if (i == imm1) te = b_e(j)
      if (j == 2) ts = -b_s(i)
      if (j == jmm1) tn = b_n(i)
      radiating = ((tw + te) + ts) + tn
      if (interior(i,j)) then
        diag(i,j) = art(i,j) + c_u(i,j) + c_u(i+1,j) + c_v(i,j) + c_v(i,j+1) &
                    + theta*dt_*radiating
        divo = old_u(i+1,j) - old_u(i,j) + old_v(i,j+1) - old_v(i,j)
        diva = a_u(i+1,j) - a_u(i,j) + a_v(i,j+1) - a_v(i,j)
        rhs(i,j) = art(i,j)*el(i,j) - dt_*(1.d0 - theta)*divo - dt_*theta*diva &
                   - dt_*art(i,j)*vfluxf(i,j)
        active(i,j) = 1.d0
      else
        diag(i,j) = 1.d0
        rhs(i,j) = 0.d0
        active(i,j) = 0.d0
      end if
    end do
  end do
  call cg_solve(im, jm, diag, c_u, c_v, active, rhs, cg_tol, cg_maxiter, solved, &
                cg_residual, cg_iters)

  ! the transports of the solved elevation, then continuity itself
  do j = 1, jm
    do i = 1, im
      new_u(i,j) = 0.d0
      new_v(i,j) = 0.d0
    end do
  end do
  ! (on the faces between two unknowns only, as c_u, c_v: a face to land
  ! or to the boundary ring carries no transport but an open edge's)
  do j = 2, jmm1
    do i = 3, imm1
      if (open_u(i,j)) &
        new_u(i,j) = star_u(i,j) - theta*k_u(i,j)*g_u(i,j)*(solved(i,j) - solved(i-1,j))
    end do
  end do
  do j = 3, jmm1
    do i = 2, imm1
      if (open_v(i,j)) &
        new_v(i,j) = star_v(i,j) - theta*k_v(i,j)*g_v(i,j)*(solved(i,j) - solved(i,j-1))
    end do
  end do
  do j = 1, jm
    fw(j) = a_w(j) + b_w(j)*solved(2,j)
    fe(j) = a_e(j) + b_e(j)*solved(imm1,j)
  end do
  do i = 1, im
    fs(i) = a_s(i) + b_s(i)*solved(i,2)
    fn(i) = a_n(i) + b_n(i)*solved(i,jmm1)
  end do
  call implicit_faces(im, jm, new_u, new_v, fw, fe, fs, fn, flux_u, flux_v)
  do j = 1, jm
    do i = 1, im
      mean_u(i,j) = theta*flux_u(i,j) + (1.d0 - theta)*old_u(i,j)
      mean_v(i,j) = theta*flux_v(i,j) + (1.d0 - theta)*old_v(i,j)
    end do
  end do
  do j = 1, jm
    do i = 1, im
      if (interior(i,j)) then
        divm = mean_u(i+1,j) - mean_u(i,j) + mean_v(i,j+1) - mean_v(i,j)
        elf(i,j) = el(i,j) - dt_*(divm/art(i,j) + vfluxf(i,j))
      else
        elf(i,j) = 0.d0
      end if
    end do
  end do
  call bcond(1, im, jm, kb, grav, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
             zz, h, dx, dy, dt, fsm, dum, dvm, el, u, v, t, s, q2, q2l, &
             ele, elw, eln, els, uabe, uabw, vabn, vabs, tbe, tbw, tbn, tbs, &
             sbe, sbw, sbn, sbs, elf, uaf, vaf, uf, vf, w)

  ! velocities of the new transports over the new depth
  do j = 1, jm
    do i = 1, im
      dn(i,j) = h(i,j) + elf(i,j)
    end do
  end do
  do j = 1, jm
    jm1 = max(j-1, 1)
    do i = 1, im
      im1 = max(i-1, 1)
      dyu = .5d0*(dy(i,j) + dy(im1,j))
      dxv = .5d0*(dx(i,j) + dx(i,jm1))
      uaf(i,j) = flux_u(i,j)/(dyu*.5d0*(dn(i,j) + dn(im1,j)))
      vaf(i,j) = flux_v(i,j)/(dxv*.5d0*(dn(i,j) + dn(i,jm1)))
    end do
  end do
  ! bcond 2's copies
  do j = 1, jm
    uaf(1,j) = uaf(2,j)
  end do
  do i = 1, im
    vaf(i,1) = vaf(i,2)
  end do
  do j = 1, jm
    do i = 1, im
      uaf(i,j) = uaf(i,j)*dum(i,j)
      vaf(i,j) = vaf(i,j)*dvm(i,j)
    end do
  end do
  ! velocity check (generally the CFL criterion)
  vamax = 0.d0
  imax = 1
  jmax = 1
  do j = 1, jm
    do i = 1, im
      if (abs(vaf(i,j)) >= vamax) then
        vamax = abs(vaf(i,j))
        imax = i
        jmax = j
      end if
    end do
  end do
  ! the internal mode's transports (the step's mean of D ua), mean and new
  ! elevation
  do j = 1, jm
    do i = 2, im
      utf(i,j) = mean_u(i,j)/(.5d0*(dy(i,j) + dy(i-1,j)))
    end do
  end do
  do j = 2, jm
    do i = 1, im
      vtf(i,j) = mean_v(i,j)/(.5d0*(dx(i,j) + dx(i,j-1)))
    end do
  end do
  do j = 1, jm
    do i = 1, im
      egf(i,j) = theta*elf(i,j) + (1.d0 - theta)*el(i,j)
      etf(i,j) = elf(i,j)*fsm(i,j)
      fluxua(i,j) = flux_u(i,j)
      fluxva(i,j) = flux_v(i,j)
      ! time-level shift
      elb(i,j) = el(i,j)
      el(i,j) = elf(i,j)
      d(i,j) = dn(i,j)
      uab(i,j) = ua(i,j)
      ua(i,j) = uaf(i,j)
      vab(i,j) = va(i,j)
      va(i,j) = vaf(i,j)
    end do
  end do
end subroutine implicit_step
